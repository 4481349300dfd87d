"""Runbook: the agent's state file is lost or corrupt while gpu-node-0 is out of service.

The agent restarts without its memory; what it wrote on the Node (label, taint, incident annotation,
condition) is read back and the same incident continues: the node stays tainted, no new incident opens, and
it comes back only the normal way (clean readings and the dwell, or a human's release for ``replace``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_rig import CLEAN_READINGS, DWELL_S, KubeGpuNode
from structlog.testing import capture_logs

STATE_FILE = "state.json"


def lose(state_dir: Path, how: str) -> None:
    """The state file deleted, or overwritten with something that is not a state file."""
    path = state_dir / STATE_FILE
    assert path.exists()
    if how == "deleted":
        path.unlink()
    else:
        path.write_bytes(b'{"schema_version": 1, "node": "gpu-node-0", "health": {"sta')


@pytest.mark.parametrize("how", ["deleted", "corrupt"])
def test_a_lost_state_file_keeps_the_taint_until_clean_readings_and_the_dwell(
    gpu_node: KubeGpuNode, how: str
) -> None:
    """Row remap pending -> reset_gpu incident; the state file goes, the GPU is reset (healthy) and the agent
    restarts: the taint, label and annotation stay through the clean readings, the incident id is the same,
    and only the dwell after them releases the node (one GPUHealthRecovered, no second GPUHealthUnhealthy)."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    opened = gpu_node.tick().health.incident
    assert opened is not None and gpu_node.taint() == "reset_gpu:NoSchedule"

    gpu_node.nvml.reset_gpu(2)
    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, how))
    with capture_logs() as logs:
        during = gpu_node.ticks(CLEAN_READINGS, every_s=1.0)

    assert [r.health.incident.id if r.health.incident else None for r in during] == [
        opened.id
    ] * CLEAN_READINGS
    assert gpu_node.taint() == "reset_gpu:NoSchedule", "the lost state file lifted the taint"
    assert gpu_node.label() == "unhealthy"
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/incident"] == opened.id
    assert [e["incident"] for e in logs if e["event"] == "incident_resumed_after_state_loss"] == [opened.id]

    gpu_node.clock.advance(DWELL_S)
    released = gpu_node.tick()
    assert released.health.incident is None
    assert gpu_node.taint() is None and gpu_node.label() == "healthy"
    assert sorted(gpu_node.events()) == ["GPUHealthRecovered", "GPUHealthUnhealthy"]


def test_a_lost_state_file_with_the_gpu_still_faulty_continues_the_same_incident(
    gpu_node: KubeGpuNode,
) -> None:
    """XID 79 (reboot), the state file corrupt, the GPU still off the bus: same incident, node untouched."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    opened = gpu_node.tick().health.incident
    assert opened is not None
    version = gpu_node.version()

    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, "corrupt"))
    after = gpu_node.ticks(3)

    assert {r.health.incident.id for r in after if r.health.incident} == {opened.id}
    assert gpu_node.taint() == "reset_gpu:NoSchedule"
    assert gpu_node.events() == ["GPUHealthUnhealthy"]
    assert gpu_node.version() == version  # the node read back is the node wanted: not one write
    assert list(gpu_node.state_dir.glob(f"{STATE_FILE}.corrupt-*")), "the corrupt file was not set aside"


def test_a_quarantine_survives_a_lost_state_file_until_a_human_releases_it(gpu_node: KubeGpuNode) -> None:
    """An InfiniBand port down quarantines the node (replace); the port comes back, the state file is lost,
    the agent restarts: quarantined for as long as no human releases it, however clean the readings."""
    gpu_node.tick()
    gpu_node.infiniband.port_down("mlx5_6")
    quarantined = gpu_node.ticks(3, every_s=1.0)[-1].health.incident
    assert quarantined is not None and gpu_node.taint() == "replace:NoSchedule"

    gpu_node.infiniband.port_up("mlx5_6")
    gpu_node.restart_agent(meanwhile=lambda: lose(gpu_node.state_dir, "deleted"))
    gpu_node.ticks(30, every_s=60.0)  # half an hour of clean readings, far past the dwell

    assert gpu_node.taint() == "replace:NoSchedule"
    assert gpu_node.label() == "quarantined"
    assert gpu_node.agent.parts.state_machine.health.incident.id == quarantined.id  # type: ignore[union-attr]
