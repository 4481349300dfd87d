"""NvmlBackend: every v1 field from NVML, null for what NVML cannot say, lost / missing / no-driver cases."""

from __future__ import annotations

import ctypes
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from agent.backends.nvml import seam as nvml
from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.seam import NvmlBackendError, NvmlSettingError
from agent.backends.nvml.tool import main
from agent.backends.nvml.xid_watcher import XidBuffer
from core.snapshot import NodeSnapshot, XidEvent
from sim.fakes.nvml import FakeNvml

FIXED_TIME = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)


def _clock() -> datetime:
    return FIXED_TIME


def _read(fake: FakeNvml, **kwargs: Any) -> NodeSnapshot:
    with NvmlBackend(fake, node_name="gpu-node-07", clock=_clock, **kwargs) as backend:
        return backend.snapshot()


def _gpu_dict(snapshot: NodeSnapshot, index: int) -> dict[str, Any]:
    return snapshot.gpus[index].model_dump()


def _changed_keys(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {key for key in before if before[key] != after[key]}


@pytest.fixture
def baseline() -> NodeSnapshot:
    """A healthy 8-GPU H100 node, read once: the reference every fault test compares with."""
    return _read(FakeNvml("h100_sxm", seed=11))


def test_healthy_h100_node_fills_every_v1_field(baseline: NodeSnapshot) -> None:
    """All node and GPU fields are present with NVML's values in our units (mW -> W)."""
    assert baseline.node == "gpu-node-07"
    assert baseline.taken_at == FIXED_TIME
    assert baseline.driver_version == "580.95.05"
    assert baseline.nvml_error is None
    assert [gpu.index for gpu in baseline.gpus] == list(range(8))
    gpu = baseline.gpus[0]
    assert gpu.uuid.startswith("GPU-")
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.pci_bus_id == "00000000:18:00.0"
    assert gpu.serial is not None and len(gpu.serial) == 13 and gpu.serial.isdigit()
    assert len({g.serial for g in baseline.gpus}) == 8  # one board each
    assert gpu.lost is False
    assert gpu.persistence_mode is True
    assert gpu.temperature_c is not None
    assert gpu.memory_temperature_c is not None
    assert gpu.power_w is not None
    assert 60 < gpu.power_w < 90
    assert gpu.power_limit_w == 700.0
    assert gpu.clocks_event_reasons == 0x1
    assert gpu.ecc is not None
    assert gpu.ecc.enabled is True
    assert gpu.ecc.volatile_uncorrected == 0
    assert gpu.remapped_rows is not None
    assert gpu.remapped_rows.pending is False
    assert gpu.retired_pages is None  # Hopper: row remapping replaced page retirement
    assert gpu.pcie is not None
    assert (gpu.pcie.gen, gpu.pcie.width, gpu.pcie.max_gen, gpu.pcie.max_width) == (5, 16, 5, 16)
    assert gpu.nvlink is not None
    assert [link.link for link in gpu.nvlink] == list(range(18))
    assert all(link.active for link in gpu.nvlink)
    assert gpu.recovery_action == 0
    assert gpu.xid_events == []
    every_field = set(type(gpu).model_fields) - {"retired_pages", "xid_events"}
    assert {name for name in every_field if getattr(gpu, name) is None} == set()


def test_snapshot_round_trips_as_format_v1(baseline: NodeSnapshot) -> None:
    """The output validates as snapshot v1: to_json() read back gives the same snapshot."""
    text = baseline.to_json()
    assert json.loads(text)["schema"] == "gpuhealth.snapshot/v1"
    assert NodeSnapshot.model_validate_json(text) == baseline


def test_expected_gpu_count_is_passed_through() -> None:
    """expected_gpu_count comes from configuration, not from NVML."""
    assert _read(FakeNvml(seed=1), expected_gpu_count=8).expected_gpu_count == 8
    assert _read(FakeNvml(seed=1)).expected_gpu_count is None


# Which snapshot field becomes null when one NVML function answers NOT_SUPPORTED on one GPU.
NOT_SUPPORTED_CASES = [
    ("nvmlDeviceGetName", {"name"}),
    ("nvmlDeviceGetPciInfo", {"pci_bus_id"}),
    ("nvmlDeviceGetPersistenceMode", {"persistence_mode"}),
    ("nvmlDeviceGetTemperatureV", {"temperature_c"}),
    ("nvmlDeviceGetPowerUsage", {"power_w"}),
    ("nvmlDeviceGetEnforcedPowerLimit", {"power_limit_w"}),
    ("nvmlDeviceGetCurrentClocksEventReasons", {"clocks_event_reasons"}),
    ("nvmlDeviceGetEccMode", {"ecc"}),
    ("nvmlDeviceGetTotalEccErrors", {"ecc"}),
    ("nvmlDeviceGetRemappedRows", {"remapped_rows"}),
    ("nvmlDeviceGetPcieReplayCounter", {"pcie"}),
    ("nvmlDeviceGetNvLinkState", {"nvlink"}),
    ("nvmlDeviceGetNvLinkErrorCounter", {"nvlink"}),
    ("nvmlDeviceGetFieldValues", {"memory_temperature_c", "recovery_action"}),
]


@pytest.mark.parametrize(("function", "changed"), NOT_SUPPORTED_CASES)
def test_not_supported_nulls_only_its_own_field(
    baseline: NodeSnapshot, function: str, changed: set[str]
) -> None:
    """One query NOT_SUPPORTED -> that field null (or its part), every other field and GPU read as usual."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.fail_call(2, function, nvml.NVML_ERROR_NOT_SUPPORTED)
    snapshot = _read(fake)
    assert _changed_keys(_gpu_dict(baseline, 2), _gpu_dict(snapshot, 2)) == changed
    for index in (0, 1, 3, 4, 5, 6, 7):
        assert snapshot.gpus[index] == baseline.gpus[index]


def test_partly_supported_groups_keep_what_answered() -> None:
    """ECC mode unsupported keeps the counters; error counters unsupported keep the link state."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.fail_call(0, "nvmlDeviceGetEccMode")
    fake.fail_call(0, "nvmlDeviceGetNvLinkErrorCounter")
    fake.fail_call(0, "nvmlDeviceGetPcieReplayCounter")
    gpu = _read(fake).gpus[0]
    assert gpu.ecc is not None
    assert gpu.ecc.enabled is None
    assert gpu.ecc.aggregate_corrected is not None
    assert gpu.nvlink is not None
    assert gpu.nvlink[0].active is True
    assert gpu.nvlink[0].crc_errors is None
    assert gpu.pcie is not None
    assert gpu.pcie.replay_counter is None
    assert gpu.pcie.width == 16


def test_unexpected_error_on_one_field_is_null_and_logged(baseline: NodeSnapshot) -> None:
    """An NVML error that is not 'not supported' -> null for that field and a structured debug log."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.fail_call(4, "nvmlDeviceGetPowerUsage", nvml.NVML_ERROR_UNKNOWN)
    with capture_logs() as logs:
        snapshot = _read(fake)
    assert _changed_keys(_gpu_dict(baseline, 4), _gpu_dict(snapshot, 4)) == {"power_w"}
    failures = [entry for entry in logs if entry["event"] == "nvml_query_failed"]
    assert failures == [
        {
            "event": "nvml_query_failed",
            "log_level": "debug",
            "node": "gpu-node-07",
            "gpu": 4,
            "call": "nvmlDeviceGetPowerUsage",
            "code": "UNKNOWN",
        }
    ]


def test_lost_gpu_among_eight_is_marked_lost_and_the_other_seven_fully_read(baseline: NodeSnapshot) -> None:
    """GPU_IS_LOST on GPU 3: lost true with the UUID and address known from before; 0-2 and 4-7 unchanged."""
    fake = FakeNvml("h100_sxm", seed=11)
    with NvmlBackend(fake, node_name="gpu-node-07", clock=_clock) as backend:
        before = backend.snapshot()
        fake.lose_gpu(3)
        after = backend.snapshot()
    lost = after.gpus[3]
    assert lost.lost is True
    assert lost.uuid == before.gpus[3].uuid
    assert lost.pci_bus_id == "00000000:5D:00.0"
    assert lost.serial == before.gpus[3].serial is not None  # the board to pull, though NVML lost it
    assert lost.name == "NVIDIA H100 80GB HBM3"
    assert lost.temperature_c is None
    assert lost.ecc is None
    assert [gpu for gpu in after.gpus if gpu.index != 3] == [gpu for gpu in baseline.gpus if gpu.index != 3]


def test_gpu_lost_before_the_first_snapshot_gets_a_stable_placeholder_uuid() -> None:
    """No UUID ever read: the lost GPU is listed as GPU-LOST-index-<i>, the same on every snapshot."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.lose_gpu(6)
    with NvmlBackend(fake, node_name="n") as backend:
        first, second = backend.snapshot(), backend.snapshot()
    assert first.gpus[6].uuid == second.gpus[6].uuid == "GPU-LOST-index-6"
    assert first.gpus[6].lost is True
    assert len(first.gpus) == 8


def test_gpu_lost_between_handle_lookup_and_reads_keeps_what_was_read() -> None:
    """GPU_IS_LOST in the middle of reading: lost true, identity read just before kept, no exception."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.fail_call(1, "nvmlDeviceGetEccMode", nvml.NVML_ERROR_GPU_IS_LOST)
    gpu = _read(fake).gpus[1]
    assert gpu.lost is True
    assert gpu.uuid == fake.gpu_uuids[1]
    assert gpu.pci_bus_id == "00000000:2A:00.0"
    assert gpu.ecc is None


def test_gpu_lost_with_a_readable_handle_is_lost_too() -> None:
    """Handle lookup works but every query answers GPU_IS_LOST: listed lost with a placeholder UUID."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.lose_gpu(0, handle_lookup_fails=False)
    gpu = _read(fake).gpus[0]
    assert (gpu.lost, gpu.uuid) == (True, "GPU-LOST-index-0")


def test_gpu_that_errors_on_every_read_is_still_listed() -> None:
    """Every query fails: listed with index and placeholder UUID, all else null, not lost, warning logged."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.fail_gpu(5, nvml.NVML_ERROR_UNKNOWN)
    with capture_logs() as logs:
        snapshot = _read(fake)
    gpu = snapshot.gpus[5]
    assert gpu.uuid == "GPU-UNREADABLE-index-5"
    assert gpu.lost is False
    nulls = {name for name in type(gpu).model_fields if getattr(gpu, name) is None}
    assert nulls == set(type(gpu).model_fields) - {"index", "uuid", "lost", "xid_events"}
    assert any(entry["event"] == "nvml_gpu_unreadable" and entry["gpu"] == 5 for entry in logs)


def test_unreadable_gpu_keeps_the_uuid_read_earlier() -> None:
    """A GPU that starts failing every read keeps the UUID the backend read on an earlier snapshot."""
    fake = FakeNvml("h100_sxm", seed=11)
    with NvmlBackend(fake, node_name="n") as backend:
        backend.snapshot()
        fake.fail_gpu(2, nvml.NVML_ERROR_RESET_REQUIRED)
        assert backend.snapshot().gpus[2].uuid == fake.gpu_uuids[2]


def test_removed_gpu_is_simply_absent() -> None:
    """A GPU NVML no longer enumerates is not listed: 7 GPUs against an expected 8."""
    fake = FakeNvml("h100_sxm", seed=11)
    fake.remove_gpu(4)
    snapshot = _read(fake, expected_gpu_count=8)
    assert len(snapshot.gpus) == 7
    assert fake.gpu_uuids[4] not in {gpu.uuid for gpu in snapshot.gpus}
    assert snapshot.expected_gpu_count == 8


@pytest.mark.parametrize(
    ("code", "message_part"),
    [
        (nvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"),
        (nvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (nvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (nvml.NVML_ERROR_UNKNOWN, "nvmlInit failed: UNKNOWN"),
    ],
)
def test_driver_missing_gives_nvml_error_and_no_gpus(code: int, message_part: str) -> None:
    """NVML cannot be initialised: nvml_error says why, gpus is empty, and nothing is raised."""
    fake = FakeNvml(seed=0)
    fake.fail_init(code)
    snapshot = _read(fake, expected_gpu_count=8)
    assert snapshot.nvml_error is not None
    assert message_part in snapshot.nvml_error
    assert snapshot.gpus == []
    assert snapshot.expected_gpu_count == 8
    assert NodeSnapshot.model_validate_json(snapshot.to_json()) == snapshot


class _UnloadableLibrary(FakeNvml):
    """A library whose shared object cannot be loaded at all (ctypes raises OSError)."""

    def nvmlInit(self) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")


def test_os_error_loading_the_library_gives_nvml_error() -> None:
    """An OSError from loading libnvidia-ml is reported like a missing driver."""
    snapshot = _read(_UnloadableLibrary(seed=0))
    assert snapshot.nvml_error is not None
    assert "cannot open shared object file" in snapshot.nvml_error
    assert snapshot.gpus == []


def test_driver_that_appears_later_is_picked_up_on_the_next_snapshot() -> None:
    """A failed init is retried on the next snapshot."""
    fake = FakeNvml(seed=0, driver_missing=True)
    with NvmlBackend(fake, node_name="n") as backend:
        assert backend.snapshot().nvml_error is not None
        fake.set_driver_missing(False)
        assert len(backend.snapshot().gpus) == 8


def test_unavailable_nvml_is_warned_about_once_not_on_every_snapshot() -> None:
    """A node without a driver logs one warning, then debug lines, and warns again after a recovery."""
    fake = FakeNvml(seed=0, driver_missing=True)
    with capture_logs() as logs, NvmlBackend(fake, node_name="n") as backend:
        for _ in range(3):
            backend.snapshot()
        fake.set_driver_missing(False)
        backend.snapshot()
        fake.fail_init(nvml.NVML_ERROR_DRIVER_NOT_LOADED)
        backend.snapshot()
    levels = [entry["log_level"] for entry in logs if entry["event"] == "nvml_unavailable"]
    assert levels == ["warning", "debug", "debug", "warning"]


def test_nvml_is_initialised_once_per_backend_lifetime() -> None:
    """Three snapshots, one nvmlInit; close() gives it back with one nvmlShutdown."""
    fake = FakeNvml(seed=0)
    with NvmlBackend(fake, node_name="n") as backend:
        for _ in range(3):
            backend.snapshot()
        assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlShutdown"] == 1
    assert not fake.initialised


def test_closed_backend_refuses_to_read() -> None:
    """After close() the backend raises NvmlBackendError instead of silently re-initialising."""
    backend = NvmlBackend(FakeNvml(seed=0), node_name="n")
    backend.close()
    with pytest.raises(NvmlBackendError, match="closed"):
        backend.snapshot()


def test_driver_reload_is_handled_by_initialising_again() -> None:
    """NVML answers UNINITIALIZED after a driver reload: the next snapshot re-inits and reads all GPUs."""
    fake = FakeNvml(seed=0)
    with NvmlBackend(fake, node_name="n") as backend:
        backend.snapshot()
        fake.reload_driver()
        snapshot = backend.snapshot()
    assert snapshot.nvml_error is None
    assert len(snapshot.gpus) == 8
    assert fake.calls["nvmlInit"] == 2


def test_negative_expected_gpu_count_is_rejected() -> None:
    """Bad configuration is a clear NvmlSettingError."""
    with pytest.raises(NvmlSettingError, match="expected_gpu_count"):
        NvmlBackend(FakeNvml(seed=0), node_name="n", expected_gpu_count=-1)


def test_pcie_board_has_nvlink_null() -> None:
    """A100 PCIe: NVLink NOT_SUPPORTED on link 0 means 'no NVLink' (null), not 'links down'."""
    snapshot = _read(FakeNvml("a100_pcie", seed=2))
    assert len(snapshot.gpus) == 4
    assert all(gpu.nvlink is None for gpu in snapshot.gpus)
    assert all(gpu.remapped_rows is not None for gpu in snapshot.gpus)
    assert snapshot.gpus[0].pcie is not None
    assert snapshot.gpus[0].pcie.max_gen == 4


def test_v100_has_retired_pages_and_no_remapped_rows() -> None:
    """V100: retired pages filled (both causes, pending), remapped rows and recovery action null."""
    fake = FakeNvml("v100_sxm2", seed=2)
    fake.set_retired_pages(1, double_bit=3, single_bit=2, pending=True)
    snapshot = _read(fake)
    gpu = snapshot.gpus[1]
    assert gpu.retired_pages is not None
    assert (gpu.retired_pages.double_bit, gpu.retired_pages.single_bit, gpu.retired_pages.pending) == (
        3,
        2,
        True,
    )
    assert gpu.remapped_rows is None
    assert gpu.recovery_action is None
    assert gpu.memory_temperature_c is None
    assert gpu.temperature_c is not None  # read through the older nvmlDeviceGetTemperature
    assert gpu.nvlink is not None
    assert len(gpu.nvlink) == 6
    assert snapshot.driver_version == "535.274.02"


def test_old_driver_without_clocks_event_reasons_falls_back_to_throttle_reasons() -> None:
    """FUNCTION_NOT_FOUND for the new name: the deprecated throttle-reasons call gives the same mask."""
    fake = FakeNvml(seed=2, missing_functions={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake.throttle(0, "hw_slowdown")
    assert _read(fake).gpus[0].clocks_event_reasons == 0x8
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 8


def test_faults_show_in_the_snapshot() -> None:
    """Injected faults arrive in their v1 fields: DBE counts, pending remap, PCIe width, link, action."""
    fake = FakeNvml(seed=3)
    fake.set_ecc_dbe(0, volatile=1)
    fake.set_row_remap(1, pending=True, uncorrectable=2)
    fake.degrade_pcie(2, width=8)
    fake.nvlink_down(3, 5)
    fake.add_nvlink_errors(3, 6, replay=4, crc=7)
    fake.set_recovery_action(4, 2)
    fake.throttle(5, "hw_power_brake")
    fake.set_temperature(6, gpu_c=91, memory_c=95)
    fake.set_power(7, 655.25)
    gpus = _read(fake).gpus
    assert gpus[0].ecc is not None
    assert (gpus[0].ecc.volatile_uncorrected, gpus[0].ecc.aggregate_uncorrected) == (1, 1)
    assert gpus[1].remapped_rows is not None
    assert (gpus[1].remapped_rows.pending, gpus[1].remapped_rows.uncorrectable) == (True, 2)
    assert gpus[2].pcie is not None
    assert (gpus[2].pcie.width, gpus[2].pcie.max_width) == (8, 16)
    assert gpus[3].nvlink is not None
    assert gpus[3].nvlink[5].active is False
    assert (gpus[3].nvlink[6].replay_errors, gpus[3].nvlink[6].crc_errors) == (4, 7)
    assert gpus[4].recovery_action == 2
    assert gpus[5].clocks_event_reasons == 0x80
    assert (gpus[6].temperature_c, gpus[6].memory_temperature_c) == (91, 95)
    assert gpus[7].power_w == 655.25


def test_xids_from_the_buffer_are_attached_to_their_gpu_newest_last() -> None:
    """Buffered XIDs go to the GPU with that UUID (or PCI address), in order; strangers are unattributed."""
    fake = FakeNvml(seed=4)
    buffer = XidBuffer()
    uuid = fake.gpu_uuids[2]
    first = XidEvent(xid=13, source="nvml", gpu_uuid=uuid, at=FIXED_TIME)
    second = XidEvent(xid=31, source="nvml", gpu_uuid=uuid, at=FIXED_TIME)
    by_address = XidEvent(xid=48, source="kernel_log", pci_bus_id="0000:db:00")
    stranger = XidEvent(xid=79, source="kernel_log", pci_bus_id="0000:77:00")
    for event in (first, second, by_address, stranger):
        buffer.append(event)
    with NvmlBackend(fake, node_name="n", xid_buffer=buffer) as backend:
        snapshot = backend.snapshot()
        again = backend.snapshot()
    assert snapshot.gpus[2].xid_events == [first, second]
    assert snapshot.gpus[7].xid_events == [by_address]
    assert snapshot.unattributed_xid_events == [stranger]
    assert all(gpu.xid_events == [] for gpu in again.gpus)
    assert NodeSnapshot.model_validate_json(snapshot.to_json()) == snapshot


def test_xids_are_kept_as_unattributed_when_nvml_is_unavailable() -> None:
    """No driver: buffered XIDs are not lost; they travel as unattributed events."""
    fake = FakeNvml(seed=4, driver_missing=True)
    buffer = XidBuffer()
    event = XidEvent(xid=79, source="nvml", gpu_uuid=fake.gpu_uuids[0])
    buffer.append(event)
    snapshot = _read(fake, xid_buffer=buffer)
    assert snapshot.unattributed_xid_events == [event]


def test_xid_buffer_is_bounded_and_counts_what_it_dropped() -> None:
    """An XID storm cannot grow the buffer without bound: oldest dropped, drop count kept."""
    buffer = XidBuffer(maxlen=3)
    for xid in range(5):
        buffer.append(XidEvent(xid=xid, source="nvml", gpu_uuid="GPU-a"))
    assert buffer.dropped == 2
    assert [event.xid for event in buffer.drain("GPU-a")] == [2, 3, 4]
    assert len(buffer) == 0
    with pytest.raises(NvmlSettingError):
        XidBuffer(maxlen=0)


# --- the real pynvml module (no driver on the test machines) --------------------------------------------


def _libnvidia_ml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_backend_reports_the_missing_library_or_reads_gpus() -> None:
    """With the real pynvml: no libnvidia-ml -> nvml_error and no GPUs; with one -> a valid snapshot."""
    with NvmlBackend(node_name="real") as backend:
        snapshot = backend.snapshot()
    assert NodeSnapshot.model_validate_json(snapshot.to_json()) == snapshot
    if _libnvidia_ml_present():
        assert snapshot.nvml_error is None or "driver" in snapshot.nvml_error
    else:
        assert snapshot.nvml_error is not None
        assert "libnvidia-ml.so.1 not found" in snapshot.nvml_error
        assert snapshot.gpus == []


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """main() configures structlog for the process, as an entry point should; undo it after the test."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


# --- python -m agent.backends.nvml.seam ----------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
def test_main_snapshot_prints_a_valid_v1_snapshot() -> None:
    """--snapshot prints one v1 snapshot of the node and exits 0."""
    out = io.StringIO()
    assert main(["--snapshot", "--node", "probe-node"], library=FakeNvml(seed=5), out=out) == 0
    snapshot = NodeSnapshot.model_validate_json(out.getvalue())
    assert snapshot.node == "probe-node"
    assert len(snapshot.gpus) == 8


@pytest.mark.usefixtures("restore_logging")
def test_main_probe_prints_one_line_per_call_with_its_outcome() -> None:
    """--probe on a V100: remapped rows NOT_SUPPORTED, the V temperature call FUNCTION_NOT_FOUND, rest OK."""
    out = io.StringIO()
    assert main(["--probe"], library=FakeNvml("v100_sxm2", 1, seed=5), out=out) == 0
    lines = {tuple(line.split()[:3]) for line in out.getvalue().splitlines()}
    assert ("gpu0", "nvmlDeviceGetRemappedRows", "NOT_SUPPORTED") in lines
    assert ("gpu0", "nvmlDeviceGetTemperatureV(0)", "FUNCTION_NOT_FOUND") in lines
    assert ("gpu0", "nvmlDeviceGetRetiredPagesPendingStatus", "OK") in lines
    assert ("gpu0", "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", "NOT_SUPPORTED") in lines
    assert ("gpu0", "nvmlDeviceRegisterEvents(XidCriticalError)", "OK") in lines
    assert ("system", "nvmlInit", "OK") in lines
    assert ("gpu0", "nvmlDeviceGetTotalEccErrors(1,1)", "OK") in lines
    assert ("gpu0", "nvlink_links_read_by_backend", "OK") in lines


@pytest.mark.usefixtures("restore_logging")
def test_main_probe_without_driver_says_so_and_exits_3() -> None:
    """--probe with no driver: the nvmlInit line names the error; exit 3 (unknown)."""
    out = io.StringIO()
    assert main(["--probe"], library=FakeNvml(seed=5, driver_missing=True), out=out) == 3
    assert out.getvalue().split()[:3] == ["system", "nvmlInit", "LIBRARY_NOT_FOUND"]


def test_a_driver_without_the_serial_call_leaves_it_null() -> None:
    """The serial is optional: a GPU (or binding) that cannot say it reads as null, the rest as always."""
    fake = FakeNvml("h100_sxm", seed=11, missing_functions={"nvmlDeviceGetSerial"})
    snapshot = _read(fake)
    assert [gpu.serial for gpu in snapshot.gpus] == [None] * 8
    assert all(gpu.temperature_c is not None for gpu in snapshot.gpus)
