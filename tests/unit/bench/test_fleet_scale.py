"""The fleet-scale benchmark's own arithmetic: the phases' node counts and the aggregator's p99."""

from __future__ import annotations

import math

import pytest

from aggregator.settings import AggregatorSettings
from bench.fleet_scale import BURST_DWELL_S, DRAIN_DWELL_S, Plan, _dwell_s, main, missed_taints, report_p99
from bench.fleet_stack import histogram_quantile
from sim.scenario.model import MAX_FLEET_NODES, Fleet

INF = math.inf


def test_burst_is_a_quarter_below_4000_nodes_and_1000_from_there() -> None:
    assert Plan.of(1000, 200, 50).burst == 250
    assert Plan.of(4000, 200, 50).burst == 1000
    assert Plan.of(5000, 200, 50).burst == 1000


def test_a_fleet_too_small_for_its_phases_is_refused() -> None:
    with pytest.raises(ValueError, match="too few"):
        Plan.of(200, 200, 10)  # 200 single faults leave no node for the burst, the drains or the spares


def test_the_quantile_counts_only_what_came_between_the_two_scrapes() -> None:
    before = {0.01: 100.0, 0.05: 100.0, 0.1: 100.0, INF: 100.0}  # all before the run, all fast
    after = {0.01: 100.0, 0.05: 150.0, 0.1: 200.0, INF: 200.0}  # 50 in (0.01, 0.05], 50 in (0.05, 0.1]
    assert histogram_quantile(before, after, 0.5) == pytest.approx(0.05)
    assert histogram_quantile(before, after, 0.99) == pytest.approx(0.05 + 0.05 * (49 / 50))


def test_observations_past_the_last_bound_answer_that_bound_and_none_answer_none() -> None:
    after = {0.01: 0.0, 2.5: 90.0, INF: 100.0}
    assert histogram_quantile({}, after, 0.99) == 2.5
    assert histogram_quantile(after, after, 0.99) is None


def test_a_phase_reports_its_count_and_p99_in_milliseconds() -> None:
    before = {0.01: 10.0, 0.1: 10.0, INF: 10.0}
    after = {0.01: 10.0, 0.1: 110.0, INF: 110.0}  # 100 reports, all in (10 ms, 100 ms]
    assert report_p99(before, after) == {"reports": 100, "p99_ms": 99.1}
    assert report_p99(after, after) == {"reports": 0, "p99_ms": None}


def test_a_faulted_node_stays_unhealthy_past_the_settle_wait_when_its_phase_needs_it() -> None:
    """A drain-phase node must still be unhealthy when its permit is asked after the aggregator's settle
    wait, and a burst node past the breaker's trip on a starved machine: else a node that recovered first
    would pass for a drain the breaker prevented. Single-fault nodes recover at once; the others never."""
    settle_s = AggregatorSettings.model_fields["permit_settle_s"].default
    sets = {"single": ["a"], "burst": ["b"], "drain": ["c"]}
    assert _dwell_s("c", sets) == DRAIN_DWELL_S > settle_s
    assert _dwell_s("b", sets) == BURST_DWELL_S > 2 * settle_s
    assert _dwell_s("a", sets) == 0.0
    assert _dwell_s("d", sets) == 600.0


def test_a_fleet_larger_than_the_model_allows_is_refused_before_anything_starts() -> None:
    """--nodes above the fleet model's maximum is refused by the plan (a one-line error in main), not by the
    model at the agents' start, half an hour into the control plane's start-up (it was, at 10,001)."""
    with pytest.raises(ValueError, match="at most 10000 nodes"):
        Plan.of(MAX_FLEET_NODES + 1, 200, 50)
    assert Plan.of(MAX_FLEET_NODES, 200, 50).burst == 1000
    assert Fleet(nodes=MAX_FLEET_NODES).nodes == 10_000


def test_main_refuses_an_oversized_fleet_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", str(MAX_FLEET_NODES + 1), "--no-drain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fleet_scale: error: at most {MAX_FLEET_NODES} nodes, not {MAX_FLEET_NODES + 1}"]


def test_a_burst_node_tainted_after_the_window_is_missed_and_counted_late_with_its_host() -> None:
    """A stalled agent host shows as its share of the burst missing the window; the watch's later taints
    say whether those nodes were tainted at all, and when."""
    started, window_end = 100.0, 220.0
    taints = {"a": 110.0, "b": 219.9, "c": 260.5, "d": None}
    late = missed_taints(list(taints), taints.get, started, window_end)
    assert late.missed == ["c", "d"]
    assert late.late_s == {"c": pytest.approx(160.5)}
    hosts = {"a": 0, "b": 1, "c": 11, "d": 2}
    assert late.figures(hosts.__getitem__) == {
        "missed_window": 2,
        "tainted_late": 1,
        "late_max_s": 160.5,
        "missed_by_host": {"2": 1, "11": 1},
    }


def test_a_burst_with_every_node_in_the_window_misses_none() -> None:
    late = missed_taints(["a", "b"], {"a": 1.0, "b": 2.0}.get, 0.0, 2.0)
    assert late.figures(lambda _name: 0) == {
        "missed_window": 0,
        "tainted_late": 0,
        "late_max_s": None,
        "missed_by_host": {},
    }
