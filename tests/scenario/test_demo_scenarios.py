"""Every shipped scenario plays to the end with every expectation held (the quick fleet where it has one).

These are the runbooks of `gpuhealth demo`: the default story (XID 79 drained, the JobSet restarted, the
node rebooted, validated and released; XID 13 left in service; a pending row remap drained, reset,
validated and released; a flapping thermal signal ignored; a burst that trips the breaker with no mass
drain; alerts sent), an API outage, and the breaker on its own; and the default story again on Nomad.
"""

from __future__ import annotations

from typing import Literal

import pytest
from recording_observer import RecordingObserver

from sim.scenario import agents, engine, hosts
from sim.scenario.engine import run_scenario
from sim.scenario.loader import ScenarioError, load_scenario, parse_scenario, shipped_scenarios


def test_the_package_ships_the_default_scenario_and_focused_ones() -> None:
    assert {"default", "api-outage", "breaker"} <= shipped_scenarios().keys()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(shipped_scenarios()))
def test_shipped_scenario_holds_every_expectation(name: str) -> None:
    scenario = load_scenario(shipped_scenarios()[name])
    if scenario.quick_nodes is not None:
        scenario = scenario.resized(scenario.quick_nodes)
    observer = RecordingObserver()

    summary = run_scenario(scenario, observer)

    failed = [
        f"{r.name}: expected {r.expected}, observed {r.observed}"
        for r in summary.expectations
        if not r.passed
    ]
    assert summary.passed, "\n".join([*failed, "--- timeline:", *observer.lines])
    assert summary.expectations and len(summary.expectations) == len(scenario.expectations)


POOLED = """
schema: gpuhealth.scenario/v1
name: pooled
fleet: {nodes: 3, gpus_per_node: 2}
timeline:
  - {at: 0.5s, name: hit, target: {role: idle, index: 1}, fault: {kind: xid, xid: 79}}
  - {at: 0.5s, name: app, target: {role: idle, index: 0}, fault: {kind: xid, xid: 13}}
expectations:
  - {name: tainted, kind: taint, target: {injection: hit}, value: reboot, by: 6s}
  - {name: labelled, kind: node_state, target: {injection: hit}, states: [unhealthy], by: 6s}
  - {name: XID 13 untouched, kind: taint, target: {injection: app}, present: false, during: {start: 0.5s, end: 3s}}
"""


def test_agents_ticked_by_the_pool_of_a_large_fleet_taint_at_once_on_an_xid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pooled driver (used above 64 nodes) runs the same real agents: an XID wakes its agent's pass
    at once (well before the next interval), and an application XID leaves its node alone."""
    monkeypatch.setattr(agents, "THREADED_UP_TO", 0)
    scenario = parse_scenario(POOLED)

    summary = run_scenario(scenario, RecordingObserver())

    assert summary.passed, summary.expectations
    (latency,) = [item for item in summary.fault_to_taint if item.injection == "hit"]
    assert latency.seconds is not None and latency.seconds < scenario.fleet.agent.interval_s * 3


@pytest.mark.timeout(150)
@pytest.mark.parametrize("orchestrator", ["kubernetes", "nomad"])
def test_agents_in_host_processes_taint_at_once_on_an_xid(
    monkeypatch: pytest.MonkeyPatch, orchestrator: Literal["kubernetes", "nomad"]
) -> None:
    """A large fleet's agents run in child processes, a share of the nodes each, and take the engine's faults
    over a pipe: the same expectations hold, and an XID still wakes its agent at once. Two hosts here."""
    monkeypatch.setattr(engine, "HOSTED_FROM", 0)
    monkeypatch.setattr(hosts, "host_count", lambda nodes: 2)
    scenario = parse_scenario(POOLED).on(orchestrator)

    summary = run_scenario(scenario, RecordingObserver())

    assert summary.passed, summary.expectations
    (latency,) = [item for item in summary.fault_to_taint if item.injection == "hit"]
    assert latency.seconds is not None and latency.seconds < scenario.fleet.agent.interval_s * 3


@pytest.mark.timeout(150)
def test_default_scenario_plays_on_nomad_with_every_expectation_held() -> None:
    """The same story on the emulated Nomad: metadata for the state, eligibility for the quarantine, a drain
    that leaves the agent's system job, the batch job's allocations replaced, the nodes recovered."""
    scenario = load_scenario(shipped_scenarios()["default"]).on("nomad")
    observer = RecordingObserver()

    summary = run_scenario(scenario, observer)

    failed = [f"{r.name}: observed {r.observed}" for r in summary.expectations if not r.passed]
    assert summary.passed, "\n".join([*failed, "--- timeline:", *observer.lines])
    assert summary.orchestrator == "nomad"
    assert len(summary.expectations) == len(scenario.expectations)


RECOVERY = """
schema: gpuhealth.scenario/v1
name: recovery
fleet:
  nodes: 3
  gpus_per_node: 2
  agent: {recovery: true, recovery_backoff_s: 1s, validation_clean_readings: 2}
timeline:
  - {at: 0.5s, name: lost, target: {node: gpu-node-1}, fault: {kind: xid, xid: 79}}
expectations:
  - {name: rebooted, kind: timeline, target: {injection: lost}, actions: [drain, reboot, validate], by: 12s}
  - {name: released, kind: node_state, target: {injection: lost}, states: [healthy], after: 1.5s, by: 12s}
  - {name: never reset, kind: timeline, target: {injection: lost}, actions: [reset], by: 7s}
"""


@pytest.mark.timeout(60)
def test_a_rebooted_node_is_released_and_its_timeline_shows_no_reset() -> None:
    """XID 79 with recovery on: drain, reboot request, validation, released healthy; a timeline expectation
    naming an action that never happened (reset) fails and shows what was done instead."""
    summary = run_scenario(parse_scenario(RECOVERY), RecordingObserver())

    results = {r.name: r for r in summary.expectations}
    assert results["rebooted"].passed, results["rebooted"].observed
    assert results["released"].passed, results["released"].observed
    assert not results["never reset"].passed
    assert "reboot" in results["never reset"].observed and "reset" not in results["never reset"].observed


@pytest.mark.parametrize(
    "expectation",
    [
        "{name: x, kind: breaker, state: closed, after: 2s, during: {start: 1s, end: 3s}}",
        "{name: x, kind: breaker, state: closed, after: 5s, by: 3s}",
    ],
)
def test_after_goes_only_with_by_and_before_it(expectation: str) -> None:
    text = f"schema: gpuhealth.scenario/v1\nname: bad\nexpectations:\n  - {expectation}\n"
    with pytest.raises(ScenarioError, match="'after' goes with 'by'"):
        parse_scenario(text)
