"""Runbook: a GPU breaks, the node is taken out of service in the same pass; it is repaired, it comes back.

Each test reads as what an operator would see with kubectl on ``gpu-node-0``.
"""

from __future__ import annotations

from scenario_rig import CLEAN_READINGS, DWELL_S, KubeGpuNode


def test_xid_79_marks_labels_and_taints_the_node_in_the_same_tick(gpu_node: KubeGpuNode) -> None:
    """XID 79 (GPU fell off the bus) -> GPUHealthy=False, label unhealthy, taint reboot:NoSchedule, at once."""
    gpu_node.tick()
    assert gpu_node.condition() is not None and gpu_node.condition()["status"] == "True"  # type: ignore[index]  # mypy cannot narrow a call: the first call's check guards the second

    gpu_node.xid(79, gpu=3)
    result = gpu_node.tick()

    assert result.health.incident is not None
    condition = gpu_node.condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "XID_79")
    assert gpu_node.label() == "unhealthy"
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/incident"] == result.health.incident.id
    assert gpu_node.events() == ["GPUHealthUnhealthy"]
    assert not gpu_node.cordoned()  # cordon is off by default


def test_xid_13_changes_nothing_on_the_node(gpu_node: KubeGpuNode) -> None:
    """XID 13 (an application's illegal access) is the job's fault, not the node's: not one API write."""
    gpu_node.ticks(3)
    writes, version = gpu_node.writes(), gpu_node.version()

    gpu_node.xid(13)
    result = gpu_node.tick()

    assert result.steps == ()
    assert gpu_node.writes() == writes
    assert gpu_node.version() == version
    assert gpu_node.taint() is None
    assert gpu_node.label() == "healthy"


def test_a_pending_row_remap_taints_reset_gpu(gpu_node: KubeGpuNode) -> None:
    """A row remap pending on GPU 2 -> the GPU needs a reset: taint gpuhealth.io/unhealthy=reset_gpu."""
    gpu_node.tick()

    gpu_node.nvml.set_row_remap(2, pending=True)
    gpu_node.tick()

    assert gpu_node.taint() == "reset_gpu:NoSchedule"
    assert gpu_node.label() == "unhealthy"


def test_the_node_is_released_after_the_fault_clears_and_m_clean_readings_and_the_dwell(
    gpu_node: KubeGpuNode,
) -> None:
    """Remap pending -> tainted; GPU reset -> still tainted until M clean readings AND the dwell time have
    passed -> taint removed, GPUHealthy=True, label healthy, Event GPUHealthRecovered."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    gpu_node.tick()
    assert gpu_node.taint() == "reset_gpu:NoSchedule"

    gpu_node.nvml.reset_gpu(2)
    gpu_node.ticks(CLEAN_READINGS, every_s=1.0)  # M clean readings, but only 3 s of the 60 s dwell
    assert gpu_node.taint() == "reset_gpu:NoSchedule", "released before the dwell time"

    gpu_node.clock.advance(DWELL_S)
    result = gpu_node.tick()

    assert result.health.incident is None
    assert gpu_node.taint() is None
    condition = gpu_node.condition()
    assert condition is not None and condition["status"] == "True"
    assert gpu_node.label() == "healthy"
    assert sorted(gpu_node.events()) == ["GPUHealthRecovered", "GPUHealthUnhealthy"]
    assert "gpuhealth.io/incident" not in gpu_node.node()["metadata"].get("annotations", {})


def test_a_fault_that_keeps_coming_back_keeps_one_incident(gpu_node: KubeGpuNode) -> None:
    """XID 79, then 48 on another GPU: one incident, its id and start kept, reasons joined."""
    gpu_node.tick()
    gpu_node.xid(79, gpu=0)
    first = gpu_node.tick().health.incident
    gpu_node.clock.advance(5)
    gpu_node.xid(48, gpu=1)
    second = gpu_node.tick().health.incident

    assert first is not None and second is not None
    assert second.id == first.id
    assert second.started_at == first.started_at
    assert second.reasons[0] == "XID_79" and len(second.reasons) == 2
    assert gpu_node.events().count("GPUHealthUnhealthy") == 1


def test_a_healthy_node_costs_zero_api_writes_over_many_ticks(gpu_node: KubeGpuNode) -> None:
    """After the first pass marks the node healthy, an hour of passes writes nothing."""
    gpu_node.tick()
    writes, version = gpu_node.writes(), gpu_node.version()

    gpu_node.ticks(360)  # one hour at the default 10 s interval

    assert gpu_node.writes() == writes
    assert gpu_node.version() == version


def test_a_port_down_among_up_siblings_quarantines_the_node_with_the_fabric_reason(
    gpu_node: KubeGpuNode,
) -> None:
    """mlx5_6 goes down while its seven siblings stay up -> after the polled readings, GPUHealthy=False
    with reason IB_PORT_DOWN, label quarantined, taint replace:NoSchedule; the port back up and a human's
    release would end it (replace waits for a person)."""
    gpu_node.tick()
    gpu_node.infiniband.port_down("mlx5_6")
    gpu_node.ticks(3, every_s=1.0)

    condition = gpu_node.condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "IB_PORT_DOWN")
    assert "mlx5_6/1 (1: DOWN / 3: Disabled)" in condition["message"]
    assert gpu_node.label() == "quarantined"
    assert gpu_node.taint() == "replace:NoSchedule"


def test_a_gpu_whose_fabric_manager_registration_failed_takes_the_node_out_for_a_reset(
    gpu_node: KubeGpuNode,
) -> None:
    """GPU 2's NVLink fabric registration failed -> reason NVLINK_FABRIC_FAILED, taint reset_gpu; a GPU
    reset brings the registration back and the node recovers after the clean readings and the dwell."""
    gpu_node.tick()
    gpu_node.nvml.fail_fabric(2)
    gpu_node.ticks(3, every_s=1.0)
    condition = gpu_node.condition()
    assert condition is not None and condition["reason"] == "NVLINK_FABRIC_FAILED"
    assert gpu_node.taint() == "reset_gpu:NoSchedule"

    gpu_node.nvml.reset_gpu(2)
    gpu_node.ticks(CLEAN_READINGS, every_s=1.0)
    gpu_node.clock.advance(DWELL_S)
    gpu_node.tick()
    assert gpu_node.taint() is None and gpu_node.label() == "healthy"
