"""``Scenario.dilated`` and ``time_scale``: a large fleet plays the same story slower, and only times stretch."""

from __future__ import annotations

import pytest

from sim.scenario.agents import time_scale
from sim.scenario.engine import look_interval
from sim.scenario.loader import load_scenario, parse_scenario, shipped_scenarios
from sim.scenario.model import ApiOutageFault, Scenario
from sim.scenario.timeline import expand

STORY = """\
schema: gpuhealth.scenario/v1
name: t
fleet:
  nodes: 16
  aggregator: {breaker_window_s: 60s, cooldown_s: 100s, alert_poll_s: 0.2s, stale_after_intervals: 10}
  agent: {interval_s: 1s, heartbeat_s: 5s, permit_retry_s: 2s, drain_deadline_s: 30s, min_dwell_s: 60s,
          recovery: true, recovery_backoff_s: 2s, reboot_deadline_s: 20s, polled_bad_readings: 3,
          validation_clean_readings: 3}
timeline:
  - {at: 2s, name: a, target: {role: idle, count: 2}, fault: {kind: xid, xid: 79}}
  - {at: 3s, target: {role: idle, index: 3}, fault: {kind: throttle, reasons: [sw_thermal]}, clear_after: 0.4s,
     repeat: {every: 2s, times: 3}}
  - {at: 5s, fault: {kind: api_outage, seconds: 4s}}
expectations:
  - {name: tainted, kind: taint, target: {injection: a}, by: 6s, after: 1s}
  - {name: calm, kind: breaker, state: closed, during: {start: 4s, end: 12s}}
"""


def story() -> Scenario:
    return parse_scenario(STORY, "t.yaml")


def test_dilated_multiplies_every_injection_time_and_outage_length() -> None:
    slow = story().dilated(10)
    assert [(a.at, a.repair) for a in expand(slow.timeline)] == [
        (20.0, False), (30.0, False), (34.0, True), (50.0, False), (50.0, False), (54.0, True), (70.0, False),
        (74.0, True),
    ]  # fmt: skip
    outage = slow.timeline[2].fault
    assert isinstance(outage, ApiOutageFault) and outage.seconds == 40.0


def test_dilated_multiplies_expectation_deadlines_and_windows() -> None:
    tainted, calm = story().dilated(10).expectations
    assert (tainted.by, tainted.after, tainted.first_look, tainted.deadline) == (60.0, 10.0, 10.0, 60.0)
    assert calm.during is not None and (calm.during.start, calm.during.end) == (40.0, 120.0)


def test_dilated_stretches_timing_knobs_but_never_counts() -> None:
    fleet = story().dilated(10).fleet
    agent, aggregator = fleet.agent, fleet.aggregator
    assert (agent.interval_s, agent.heartbeat_s, agent.permit_retry_s) == (10.0, 50.0, 20.0)
    assert (agent.drain_deadline_s, agent.min_dwell_s) == (300.0, 600.0)
    assert (agent.recovery_backoff_s, agent.reboot_deadline_s) == (20.0, 200.0)
    assert (aggregator.breaker_window_s, aggregator.cooldown_s) == (600.0, 1000.0)
    # Counts, the fleet and the alert delivery cadence are not times of the story.
    assert (agent.polled_bad_readings, agent.validation_clean_readings) == (3, 3)
    assert (aggregator.alert_poll_s, aggregator.stale_after_intervals) == (0.2, 10.0)
    assert fleet.nodes == 16 and story().dilated(10).timeline[0].target == story().timeline[0].target


def test_dilated_by_one_is_the_scenario_itself() -> None:
    scenario = story()
    assert scenario.dilated(1) is scenario
    assert scenario.dilated(1.0).length_s == scenario.length_s


def test_dilated_length_scales_and_the_original_is_untouched() -> None:
    scenario = story()
    assert scenario.dilated(2.5).length_s == pytest.approx(2.5 * scenario.length_s)
    assert scenario.timeline[0].at == 2.0 and scenario.expectations[0].by == 6.0


def test_dilated_refuses_a_factor_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        story().dilated(0)


@pytest.mark.parametrize(("nodes", "scale"), [(16, 1.0), (100, 1.0), (200, 2.0), (1000, 10.0), (5000, 10.0)])
def test_time_scale_follows_the_fleets_slower_polling(nodes: int, scale: float) -> None:
    """1 while the fleet polls at the scenario's pace; the scaled interval over the scenario's beyond."""
    scenario = load_scenario(shipped_scenarios()["default"]).resized(nodes)
    assert time_scale(scenario.fleet) == pytest.approx(scale)


def test_time_scale_of_a_dilated_fleet_is_one() -> None:
    """The engine dilates once: the dilated scenario's own interval already is the scaled one."""
    scenario = load_scenario(shipped_scenarios()["default"]).resized(1000)
    assert time_scale(scenario.dilated(time_scale(scenario.fleet)).fleet) == 1.0


@pytest.mark.parametrize(("scale", "seconds"), [(1.0, 0.25), (2.0, 0.5), (10.0, 1.0)])
def test_expectations_are_looked_at_proportionally_less_often_up_to_a_second(
    scale: float, seconds: float
) -> None:
    assert look_interval(scale) == pytest.approx(seconds)
