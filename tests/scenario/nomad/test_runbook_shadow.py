"""Runbook on Nomad: a node pool in shadow mode marks the node (metadata) and records the rest.

XID 79 on ``gpu-node-0`` whose pool's profile is ``drain`` in shadow writing ``mark``: the node's metadata
says unhealthy, but it stays eligible and is not drained; the ineligibility and the drain are recorded as
shadow decisions with their reason. The same node in the live profile is made ineligible.
"""

from __future__ import annotations

from typing import Any

import pytest
from scenario_rig import NomadGpuNode

from agent.settings import AgentSettings
from core.clock import ManualClock
from core.steps import Drain
from remediation.plan.profiles import NodeGroup, ProfilesSettings
from sim.nomad.harness import NomadSim


def profiles(shadow: bool) -> ProfilesSettings:
    canary = {"mode": "drain", "match": {"node_pool": "canary"}, "shadow": shadow, "shadow_writes": "mark"}
    return ProfilesSettings.model_validate({"definitions": {"canary": canary}})


class PoolNode(NomadGpuNode):
    def __init__(self, sim: NomadSim, clock: ManualClock, state_dir: Any, *, shadow: bool) -> None:
        super().__init__(sim, clock, state_dir)
        self.shadow = shadow

    def settings(self, **common: Any) -> AgentSettings:
        return (
            super()
            .settings(**common)
            .model_copy(
                update={"profiles": profiles(self.shadow), "node_group": NodeGroup(node_pool="canary")}
            )
        )


@pytest.mark.parametrize("shadow", [True, False], ids=["shadow", "live"])
def test_a_pool_in_shadow_marks_the_node_and_records_the_quarantine_and_drain(
    sim: NomadSim, clock: ManualClock, tmp_path: Any, shadow: bool
) -> None:
    node = PoolNode(sim, clock, tmp_path / "state", shadow=shadow)
    node.drain_by = "aggregator"  # the drain is the central remediator's: no aggregator here, so no permit
    try:
        node.tick()
        node.xid(79, gpu=3)
        result = node.tick()
        node.ticks(2)
        assert node.state() == "unhealthy"
        shadowed = [r for r in result.report.results if r.shadow]
        if not shadow:
            assert shadowed == [] and not node.eligible()
            return
        assert node.eligible(), "shadow: the node stays eligible"
        assert node.node().get("DrainStrategy") is None
        assert any(isinstance(r.step, Drain) for r in shadowed)
        assert all(r.detail.startswith("would have ") and r.detail.endswith(": XID_79") for r in shadowed)
    finally:
        node.close()
