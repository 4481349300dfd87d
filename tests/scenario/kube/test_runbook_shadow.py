"""Runbook: a node group in shadow mode decides everything, records it, and writes only what it may.

XID 79 on ``gpu-node-0`` whose profile ``canary`` is ``drain`` in shadow (writes: ``mark``): the condition
and the label are written; the taint, the cordon and the drain are recorded as shadow decisions ("would have
tainted gpu-node-0 ... : XID_79"), and the emulated API server's record of requests shows not one write more.
"""

from __future__ import annotations

from typing import Any

import pytest
from scenario_rig import KubeGpuNode

from agent.settings import AgentSettings
from core.clock import ManualClock
from core.steps import Cordon, Drain, SetTaint
from remediation.plan.profiles import NodeGroup, ProfilesSettings
from sim.kube.faults import FaultOutcome
from sim.kube.harness import KubeSim

PROFILES = {
    "definitions": {
        "canary": {
            "mode": "drain",
            "match": {"labels": {"gpuhealth.io/group": "canary"}},
            "shadow": True,
            "shadow_writes": "mark",
        }
    }
}
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class ShadowNode(KubeGpuNode):
    def __init__(self, sim: KubeSim, clock: ManualClock, state_dir: Any, *, shadow: bool) -> None:
        super().__init__(sim, clock, state_dir)
        self.shadow = shadow

    def settings(self, **common: Any) -> AgentSettings:
        profiles = PROFILES if self.shadow else {}
        return (
            super()
            .settings(**common)
            .model_copy(
                update={
                    "profiles": ProfilesSettings.model_validate(profiles),
                    "node_group": NodeGroup(labels={"gpuhealth.io/group": "canary"}),
                }
            )
        )


def _record_writes(sim: KubeSim) -> list[tuple[str, str]]:
    """The emulated API server's record of mutating requests (every request passes its fault hook)."""
    seen: list[tuple[str, str]] = []
    decide = sim.faults.decide

    def recording(verb: str, resource: str) -> FaultOutcome:
        if verb in WRITE_VERBS:
            seen.append((verb, resource))
        return decide(verb, resource)

    sim.faults.decide = recording  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("shadow", [True, False], ids=["shadow", "live"])
def test_shadow_records_the_drain_and_writes_only_the_mark(
    sim: KubeSim, clock: ManualClock, tmp_path: Any, shadow: bool
) -> None:
    node = ShadowNode(sim, clock, tmp_path / "state", shadow=shadow)
    node.policy = node.policy.model_copy(update={"drain": not shadow, "cordon": not shadow})
    try:
        node.tick()
        writes = _record_writes(sim)
        node.xid(79, gpu=3)
        result = node.tick()
        later = node.ticks(3)

        condition = node.condition()
        assert condition is not None and condition["reason"] == "XID_79"
        assert node.label() == "unhealthy"
        shadowed = [r for r in result.report.results if r.shadow]
        if not shadow:
            assert shadowed == []
            assert node.taint() == "reboot:NoSchedule"
            return
        assert {type(r.step) for r in shadowed} >= {SetTaint, Cordon, Drain}
        taint = next(r for r in shadowed if isinstance(r.step, SetTaint))
        assert taint.detail.startswith("would have tainted gpu-node-0 reboot at ")
        assert taint.detail.endswith(": XID_79")
        assert node.taint() is None and not node.cordoned()
        assert {resource for _verb, resource in writes} <= {"nodes", "nodes/status", "events"}, writes
        assert not any("eviction" in resource or resource == "pods" for _verb, resource in writes)
        # decided once: the shadow's view of the node holds its taint, so later passes decide it no more
        assert not [r for tick in later for r in tick.report.results if r.shadow]
    finally:
        node.close()
