"""The GPUs' NVLink fabric through the NVML seam: read from NVSwitch boards, null where unsupported."""

from __future__ import annotations

from agent.backends.nvml import seam as nvml
from agent.backends.nvml.backend import NvmlBackend
from core.snapshot import GpuFabric
from sim.fakes.nvml import FakeNvml


def test_an_hgx_gpu_reports_a_completed_fabric_registration() -> None:
    snapshot = NvmlBackend(FakeNvml("h100_sxm", seed=1), node_name="n").snapshot()
    assert {gpu.fabric for gpu in snapshot.gpus} == {GpuFabric(state=3, status=0, clique_id=1)}


def test_a_pcie_board_answers_not_supported_and_the_field_is_null() -> None:
    fake = FakeNvml("a100_pcie", seed=1)
    snapshot = NvmlBackend(fake, node_name="n").snapshot()
    assert all(gpu.fabric is None for gpu in snapshot.gpus)
    assert fake.calls["nvmlDeviceGetGpuFabricInfo"] == len(snapshot.gpus)


def test_a_failed_or_unfinished_registration_and_its_repair() -> None:
    fake = FakeNvml("h200_sxm", seed=1)
    fake.fail_fabric(2)
    fake.fail_fabric(5, state=nvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, status=nvml.NVML_SUCCESS)
    backend = NvmlBackend(fake, node_name="n")
    gpus = backend.snapshot().gpus
    assert (gpus[2].fabric, gpus[5].fabric) == (
        GpuFabric(state=3, status=nvml.NVML_ERROR_UNKNOWN, clique_id=1),
        GpuFabric(state=2, status=0, clique_id=1),
    )
    fake.reset_gpu(2)
    assert backend.snapshot().gpus[2].fabric == GpuFabric(state=3, status=0, clique_id=1)


def test_a_driver_without_the_call_gives_null() -> None:
    fake = FakeNvml("h100_sxm", seed=1, missing_functions={"nvmlDeviceGetGpuFabricInfo"})
    assert all(gpu.fabric is None for gpu in NvmlBackend(fake, node_name="n").snapshot().gpus)


def test_the_fabric_health_summary_is_read_where_the_driver_reports_it() -> None:
    """nvmlDeviceGetGpuFabricInfoV (nvmlGpuFabricInfo_v3_t): healthSummary 2 unhealthy, 3 limited capacity."""
    fake = FakeNvml("h200_sxm", seed=1)
    fake.fail_fabric(1, status=nvml.NVML_SUCCESS, health=3)
    fake.fail_fabric(4, status=nvml.NVML_SUCCESS, health=2)
    gpus = NvmlBackend(fake, node_name="n").snapshot().gpus
    assert [gpu.fabric.health_summary if gpu.fabric else "none" for gpu in gpus[:5]] == [
        None,
        3,
        None,
        None,
        2,
    ]
    assert fake.calls["nvmlDeviceGetGpuFabricInfoV"] == len(gpus)
