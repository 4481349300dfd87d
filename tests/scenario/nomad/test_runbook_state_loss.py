"""Runbook on Nomad: the agent's state file is lost or corrupt while gpu-node-0 is out of service.

What the agent wrote on the node (its ``gpuhealth.*`` metadata and the ineligibility) is read back on start,
so the same incident continues: the node stays ineligible and comes back only the normal way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_rig import NomadGpuNode

STATE_FILE = "state.json"


def lose(state_dir: Path, how: str) -> None:
    """The state file deleted, or overwritten with something that is not a state file."""
    path = state_dir / STATE_FILE
    assert path.exists()
    if how == "deleted":
        path.unlink()
    else:
        path.write_bytes(b"\x00\x01 not json")


@pytest.mark.parametrize("how", ["deleted", "corrupt"])
def test_a_lost_state_file_keeps_the_node_ineligible_until_clean_readings_and_the_dwell(
    gpu_node: NomadGpuNode, how: str
) -> None:
    """Row remap pending -> ineligible; the GPU reset and the state file lost across a restart: still
    ineligible, same incident in the metadata through the clean readings; eligible only after the dwell."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    opened = gpu_node.tick().health.incident
    assert opened is not None and not gpu_node.eligible()

    gpu_node.nvml.reset_gpu(2)
    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, how))
    during = gpu_node.ticks(gpu_node.clean_readings, every_s=1.0)

    assert [r.health.incident.id if r.health.incident else None for r in during] == [opened.id] * len(during)
    assert not gpu_node.eligible(), "the lost state file made the node eligible"
    assert gpu_node.meta()["gpuhealth.state"] == "unhealthy"
    assert gpu_node.meta()["gpuhealth.incident"] == opened.id

    gpu_node.clock.advance(gpu_node.dwell_s)
    assert gpu_node.tick().health.incident is None
    assert gpu_node.eligible() and gpu_node.state() == "healthy"


def test_a_lost_state_file_with_the_gpu_still_faulty_writes_nothing(gpu_node: NomadGpuNode) -> None:
    """XID 79, the state file corrupt, the GPU still bad: the same incident, the node already as wanted."""
    gpu_node.tick()
    gpu_node.xid(79)
    opened = gpu_node.tick().health.incident
    assert opened is not None
    index = gpu_node.index()

    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, "corrupt"))
    after = gpu_node.ticks(3)

    assert {r.health.incident.id for r in after if r.health.incident} == {opened.id}
    assert not gpu_node.eligible()
    assert gpu_node.executor.writes_total == 0
    assert gpu_node.index() == index


def test_a_quarantine_survives_a_lost_state_file_until_a_human_releases_it(gpu_node: NomadGpuNode) -> None:
    """An InfiniBand port down quarantines the node (replace); the port back up, the state file lost: the
    node stays ineligible and quarantined through half an hour of clean readings."""
    gpu_node.tick()
    gpu_node.infiniband.port_down("mlx5_6")
    quarantined = gpu_node.ticks(3, every_s=1.0)[-1].health.incident
    assert quarantined is not None and gpu_node.state() == "quarantined"

    gpu_node.infiniband.port_up("mlx5_6")
    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, "deleted"))
    gpu_node.ticks(30, every_s=60.0)

    assert not gpu_node.eligible()
    assert gpu_node.state() == "quarantined"
    assert gpu_node.meta()["gpuhealth.incident"] == quarantined.id
