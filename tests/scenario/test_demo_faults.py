"""Faults a scenario injects behave as the same fault does on a real node."""

from __future__ import annotations

import pytest
from recording_observer import RecordingObserver

from sim.scenario.engine import run_scenario
from sim.scenario.loader import parse_scenario

XID_154 = """
schema: gpuhealth.scenario/v1
name: xid154
fleet: {nodes: 2, gpus_per_node: 2, agent: {drain: false}}
timeline:
  - {at: 0.5s, name: reset, target: {role: idle}, fault: {kind: xid, xid: 154, message: GPU Reset Required}}
  - at: 0.5s
    name: reboot
    target: {role: idle}
    fault:
      kind: xid
      xid: 154
      message: GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
expectations:
  - {name: reset node tainted, kind: taint, target: {injection: reset}, value: reset_gpu, by: 6s}
  - {name: reboot node tainted, kind: taint, target: {injection: reboot}, value: reboot, by: 6s}
"""


@pytest.mark.timeout(90)
def test_a_scenario_xid154_alone_taints_with_the_action_its_message_names() -> None:
    """As from a driver: XID 154 "GPU Reset Required" taints reset_gpu, "Node Reboot Required" reboot."""
    observer = RecordingObserver()
    summary = run_scenario(parse_scenario(XID_154, "t.yaml"), observer)

    failed = [f"{r.name}: observed {r.observed}" for r in summary.expectations if not r.passed]
    assert summary.passed, "\n".join([*failed, *observer.lines])
