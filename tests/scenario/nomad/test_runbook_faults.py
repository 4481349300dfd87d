"""Runbook on Nomad: a GPU breaks, the node is made ineligible in the same pass and its metadata says why;
it is repaired, it comes back. Each test reads as what an operator would see with ``nomad node status``."""

from __future__ import annotations

from scenario_rig import NomadGpuNode


def test_xid_79_sets_metadata_and_makes_the_node_ineligible_in_the_same_tick(gpu_node: NomadGpuNode) -> None:
    """XID 79 on GPU 3 -> gpuhealth.state=unhealthy, gpuhealth.incident, gpuhealth.unhealthy_gpus naming
    GPU 3, and eligibility ineligible, all in the pass the XID woke."""
    gpu_node.tick()
    assert gpu_node.state() == "healthy" and gpu_node.eligible()

    gpu_node.xid(79, gpu=3)
    result = gpu_node.tick()

    incident = result.health.incident
    assert incident is not None
    meta = gpu_node.meta()
    assert meta["gpuhealth.state"] == "unhealthy"
    assert meta["gpuhealth.incident"] == incident.id
    assert meta["gpuhealth.unhealthy_gpus"] == gpu_node.nvml.gpu_uuids[3]
    assert meta["gpuhealth.reason"] == "XID_79"
    assert not gpu_node.eligible()
    assert meta["gpuhealth.ineligible_by"] == "gpuhealth"


def test_xid_13_changes_nothing_on_the_node(gpu_node: NomadGpuNode) -> None:
    """XID 13 is the application's fault: not one write, the node index unchanged."""
    gpu_node.ticks(3)
    writes, index = gpu_node.writes(), gpu_node.index()

    gpu_node.xid(13)
    result = gpu_node.tick()

    assert result.steps == ()
    assert (gpu_node.writes(), gpu_node.index()) == (writes, index)
    assert gpu_node.state() == "healthy" and gpu_node.eligible()


def test_the_node_is_released_after_the_fault_clears_and_m_clean_readings_and_the_dwell(
    gpu_node: NomadGpuNode,
) -> None:
    """Remap pending -> ineligible; GPU reset -> still ineligible until M clean readings and the dwell ->
    eligible again, state healthy, the incident's keys gone."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    gpu_node.tick()
    assert not gpu_node.eligible()

    gpu_node.nvml.reset_gpu(2)
    gpu_node.ticks(gpu_node.clean_readings, every_s=1.0)
    assert not gpu_node.eligible(), "released before the dwell time"

    gpu_node.clock.advance(gpu_node.dwell_s)
    result = gpu_node.tick()

    assert result.health.incident is None
    assert gpu_node.eligible()
    meta = gpu_node.meta()
    assert meta["gpuhealth.state"] == "healthy"
    assert not {"gpuhealth.incident", "gpuhealth.unhealthy_gpus", "gpuhealth.ineligible_by"} & set(meta)


def test_a_healthy_node_costs_zero_writes_over_many_ticks(gpu_node: NomadGpuNode) -> None:
    """After the first pass marks the node healthy, an hour of passes writes nothing."""
    gpu_node.tick()
    writes, index = gpu_node.writes(), gpu_node.index()

    gpu_node.ticks(360)

    assert gpu_node.writes() == writes
    assert gpu_node.index() == index


def test_a_flapping_infiniband_port_makes_the_node_ineligible_through_the_same_metadata(
    gpu_node: NomadGpuNode,
) -> None:
    """IB port mlx5_3 flaps three times -> gpuhealth.state=quarantined (action replace: a technician),
    reason IB_LINK_FLAP, ineligible: the fabric acts through the metadata and eligibility path; no GPU is
    named (the fault is the node's)."""
    gpu_node.tick()
    gpu_node.infiniband.flap("mlx5_3", times=3)
    gpu_node.ticks(3, every_s=1.0)

    meta = gpu_node.meta()
    assert meta["gpuhealth.state"] == "quarantined"
    assert meta["gpuhealth.reason"] == "IB_LINK_FLAP"
    assert meta.get("gpuhealth.unhealthy_gpus", "") == ""
    assert not gpu_node.eligible()


def test_a_gpu_out_of_its_nvlink_fabric_is_named_in_the_metadata(gpu_node: NomadGpuNode) -> None:
    """GPU 5's fabric registration failed -> the node goes ineligible and gpuhealth.unhealthy_gpus names
    GPU 5's UUID, so job constraints can avoid it (the stock device plugin cannot quarantine one GPU)."""
    gpu_node.tick()
    gpu_node.nvml.fail_fabric(5)
    gpu_node.ticks(3, every_s=1.0)

    meta = gpu_node.meta()
    assert meta["gpuhealth.reason"] == "NVLINK_FABRIC_FAILED"
    assert meta["gpuhealth.unhealthy_gpus"] == gpu_node.nvml.gpu_uuids[5]
    assert not gpu_node.eligible()
