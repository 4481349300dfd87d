"""A played scenario: each injection's role target resolves on its own, and a scenario that cannot be
played is refused before anything starts (or, when that shows only while playing, ends cleanly)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from sim.scenario.engine import LiveState, ScenarioRunError, run_scenario
from sim.scenario.loader import parse_scenario


class Recording:
    """An observer that keeps every line it is given and draws nothing."""

    live = False

    def __init__(self) -> None:
        self.lines: list[str] = []

    def progress(self, text: str) -> None:
        self.lines.append(text)

    def event(self, at_s: float, text: str) -> None:
        self.lines.append(f"{at_s:5.1f}s {text}")

    def refresh(self, state: LiveState) -> None:
        return


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
    observer = Recording()
    summary = run_scenario(parse_scenario(TWO_IDLE_HITS, "t.yaml"), observer)

    assert summary.passed, "\n".join(observer.lines)
    hit = {latency.injection: latency.node for latency in summary.fault_to_taint}
    assert hit.keys() == {"first", "second"}
    assert hit["first"] != hit["second"], "\n".join(observer.lines)
