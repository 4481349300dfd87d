"""A played scenario: each injection's role target resolves on its own, and a scenario that cannot be
played is refused before anything starts (or, when that shows only while playing, ends cleanly)."""

from __future__ import annotations

import threading

import pytest
from recording_observer import RecordingObserver

from sim.scenario.engine import ScenarioRunError, run_scenario
from sim.scenario.loader import parse_scenario

TWO_IDLE_HITS = """
schema: gpuhealth.scenario/v1
name: two-idle-hits
fleet: {nodes: 3, gpus_per_node: 2}
timeline:
  - {at: 0.5s, name: first, target: {role: idle}, fault: {kind: xid, xid: 79}}
  - {at: 0.5s, name: second, target: {role: idle}, fault: {kind: xid, xid: 79}}
expectations:
  - {name: first tainted, kind: taint, target: {injection: first}, value: reboot, by: 8s}
  - {name: second tainted, kind: taint, target: {injection: second}, value: reboot, by: 8s}
"""


@pytest.mark.timeout(90)
def test_two_injections_on_the_same_role_break_two_nodes() -> None:
    """Two `{role: idle}` XID 79s at once: two nodes tainted reboot, not one node hit twice."""
    observer = RecordingObserver()
    summary = run_scenario(parse_scenario(TWO_IDLE_HITS, "t.yaml"), observer)

    assert summary.passed, "\n".join(observer.lines)
    hit = {latency.injection: latency.node for latency in summary.fault_to_taint}
    assert hit.keys() == {"first", "second"}
    assert hit["first"] != hit["second"], "\n".join(observer.lines)


TOO_MANY = """
schema: gpuhealth.scenario/v1
name: too-many
fleet: {nodes: 4, gpus_per_node: 2}
timeline:
  - {at: 0.5s, name: first, target: {role: idle}, fault: {kind: xid, xid: 13}}
  - {at: 1s, name: burst, target: {role: idle, count: 6}, fault: {kind: xid, xid: 79}}
expectations:
  - {name: tainted, kind: taint, target: {injection: burst}, value: reboot, by: 5s}
"""


@pytest.mark.timeout(30)
def test_a_role_target_larger_than_the_fleet_is_refused_before_anything_starts() -> None:
    """Six idle nodes wanted of four: ScenarioRunError naming the injection, and no fleet was started."""
    observer = RecordingObserver()
    with pytest.raises(ScenarioRunError, match=r"injection burst: 6 idle nodes #0") as caught:
        run_scenario(parse_scenario(TOO_MANY, "t.yaml"), observer)

    assert "\n" not in str(caught.value)
    assert observer.lines == [], "the fleet was started before the scenario was refused"


@pytest.fixture
def thread_failures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every exception that ends a thread (what Python would print as 'Exception in thread ...')."""
    failures: list[str] = []

    def record(args: threading.ExceptHookArgs) -> None:
        failures.append(f"{args.thread.name if args.thread else '?'}: {args.exc_value!r}")

    monkeypatch.setattr(threading, "excepthook", record)
    return failures


SHORT_WHILE_PLAYING = """
schema: gpuhealth.scenario/v1
name: short-while-playing
fleet: {nodes: 3, gpus_per_node: 2, agent: {drain: false}}
workloads:
  training: {nodes: 2}
timeline:
  - {at: 0.5s, name: first, target: {role: training}, fault: {kind: xid, xid: 79}}
  - {at: 0.5s, name: second, target: {role: training, index: 1}, fault: {kind: xid, xid: 79}}
expectations:
  - {name: tainted, kind: taint, target: {injection: first}, value: reboot, by: 5s}
"""


@pytest.mark.timeout(90)
def test_a_target_that_comes_up_short_while_playing_ends_the_run_cleanly(thread_failures: list[str]) -> None:
    """The second injection wants the second training node not hit yet, and there is none left (the
    first took one of two): one ScenarioRunError, and no thread dies with a traceback on the way out
    (the taint probe used to read the stopped orchestrator: "the orchestrator is not started")."""
    with pytest.raises(ScenarioRunError, match=r"injection second: training node #1: only 1 training node"):
        run_scenario(parse_scenario(SHORT_WHILE_PLAYING, "t.yaml"), RecordingObserver())

    # A probe left running would fail its next read within a poll (20 ms); give it ample time to.
    threading.Event().wait(0.5)
    assert thread_failures == []
    assert not [t for t in threading.enumerate() if t.name == "gpuhealth-taint-probe"]
