"""The stateful fake NVML: same surface as pynvml, documented NVML behaviour, scriptable faults."""

from __future__ import annotations

import inspect
import threading
import time

import pynvml
import pytest
from waiting import HANG_GUARD_S

from agent.backends.nvml import seam as nvml
from sim.fakes.gpu import CLOCKS_EVENT_REASONS
from sim.fakes.nvml import FakeNvml, FakeNvmlError
from sim.fakes.profiles import PROFILES
from sim.fakes.structs import FakeDeviceHandle


@pytest.fixture
def h100() -> FakeNvml:
    fake = FakeNvml("h100_sxm", seed=7, node_name="node-a")
    fake.nvmlInit()
    return fake


def _code(excinfo: pytest.ExceptionInfo[BaseException]) -> int | None:
    return nvml.error_code(excinfo.value)


def _pynvml_functions(obj: object) -> list[str]:
    return sorted(name for name in dir(obj) if name.startswith("nvml") and callable(getattr(obj, name)))


# --- drift against the real pynvml module ---------------------------------------------------------------


def test_every_fake_function_exists_in_real_pynvml_with_the_same_parameters() -> None:
    """Drift guard: the fake offers only pynvml functions, spelt and parameterised as in nvidia-ml-py."""
    fake = FakeNvml(seed=0)
    functions = _pynvml_functions(fake)
    assert len(functions) >= 30
    for name in functions:
        real = getattr(pynvml, name, None)
        assert real is not None, f"{name} is not in the installed pynvml"
        real_params = list(inspect.signature(real).parameters)
        fake_params = list(inspect.signature(getattr(fake, name)).parameters)
        assert fake_params == real_params, name


def test_the_fake_provides_every_function_of_the_backend_protocol() -> None:
    """Everything NvmlLibrary names (what the backend and watcher call) exists on the fake and on pynvml."""
    protocol_functions = [name for name in vars(nvml.NvmlLibrary) if name.startswith("nvml")]
    assert protocol_functions
    for name in protocol_functions:
        assert callable(getattr(FakeNvml, name, None)), name
        assert callable(getattr(pynvml, name, None)), name


def test_fake_and_real_pynvml_raise_the_same_class_when_uninitialised() -> None:
    """Without nvmlInit both answer UNINITIALIZED with pynvml's own NVMLError_Uninitialized class."""
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        FakeNvml(seed=0).nvmlDeviceGetCount()


def test_nvml_error_builds_the_real_pynvml_subclass_for_each_code() -> None:
    """nvml_error(code) is how the fake raises: the exact pynvml class, with the code in .value."""
    lost = nvml.nvml_error(nvml.NVML_ERROR_GPU_IS_LOST)
    assert type(lost) is pynvml.NVMLError_GpuIsLost
    assert nvml.error_code(lost) == pynvml.NVML_ERROR_GPU_IS_LOST
    assert type(nvml.nvml_error(nvml.NVML_ERROR_TIMEOUT)) is pynvml.NVMLError_Timeout


# --- initialisation -------------------------------------------------------------------------------------


def test_init_is_reference_counted_like_nvml() -> None:
    """Two nvmlInit need two nvmlShutdown before calls answer UNINITIALIZED again."""
    fake = FakeNvml(seed=0)
    fake.nvmlInit()
    fake.nvmlInit()
    fake.nvmlShutdown()
    assert fake.nvmlDeviceGetCount() == 8
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlShutdown()


def test_missing_driver_raises_library_not_found_at_init_and_can_be_restored() -> None:
    """driver_missing: nvmlInit raises NVMLError_LibraryNotFound until the driver is back."""
    fake = FakeNvml(seed=0, driver_missing=True)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        fake.nvmlInit()
    fake.set_driver_missing(False)
    fake.nvmlInit()
    assert fake.initialised


def test_fail_init_raises_the_chosen_code_and_ends_open_sessions(h100: FakeNvml) -> None:
    """fail_init(DRIVER_NOT_LOADED): the driver went away under an initialised caller."""
    h100.fail_init(nvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        h100.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        h100.nvmlInit()


def test_reload_driver_makes_every_caller_initialise_again(h100: FakeNvml) -> None:
    """After a driver reload NVML answers UNINITIALIZED until nvmlInit is called again."""
    h100.reload_driver()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        h100.nvmlDeviceGetCount()
    h100.nvmlInit()
    assert h100.nvmlDeviceGetCount() == 8


# --- profiles and return shapes -------------------------------------------------------------------------


def test_h100_profile_looks_like_an_hgx_board(h100: FakeNvml) -> None:
    """8 GPUs, the driver's model name, HGX bus numbers, 700 W, PCIe gen5 x16, 18 NVLink links."""
    handles = [h100.nvmlDeviceGetHandleByIndex(i) for i in range(h100.nvmlDeviceGetCount())]
    assert len(handles) == 8
    assert h100.nvmlDeviceGetName(handles[0]) == "NVIDIA H100 80GB HBM3"
    buses = [h100.nvmlDeviceGetPciInfo(h).busId for h in handles]
    assert buses[0] == "00000000:18:00.0"
    assert [bus[9:11] for bus in buses] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert h100.nvmlDeviceGetEnforcedPowerLimit(handles[0]) == 700_000
    assert h100.nvmlDeviceGetMaxPcieLinkGeneration(handles[0]) == 5
    assert h100.nvmlDeviceGetCurrPcieLinkWidth(handles[0]) == 16
    assert h100.nvmlDeviceGetNvLinkState(handles[0], 17) == nvml.NVML_FEATURE_ENABLED
    with pytest.raises(pynvml.NVMLError_NotSupported):
        h100.nvmlDeviceGetNvLinkState(handles[0], 18)
    assert h100.nvmlSystemGetDriverVersion() == "580.95.05"


def test_h200_profile_is_named_as_the_driver_names_it() -> None:
    """h200_sxm: 'NVIDIA H200', 8 GPUs, 700 W."""
    fake = FakeNvml("h200_sxm", seed=1)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetName(handle) == "NVIDIA H200"
    assert fake.nvmlDeviceGetCount() == 8
    assert fake.nvmlDeviceGetEnforcedPowerLimit(handle) == 700_000


def test_remapped_rows_is_a_4_tuple_and_pci_bus_id_a_str(h100: FakeNvml) -> None:
    """Return shapes as nvidia-ml-py 13 gives them: a tuple of four ints, busId already decoded."""
    handle = h100.nvmlDeviceGetHandleByIndex(0)
    h100.set_row_remap(0, pending=True, correctable=2)
    assert h100.nvmlDeviceGetRemappedRows(handle) == (2, 0, 1, 0)
    assert isinstance(h100.nvmlDeviceGetPciInfo(handle).busId, str)
    assert h100.nvmlDeviceGetUUID(handle).startswith("GPU-")
    assert h100.nvmlDeviceGetEccMode(handle) == [nvml.NVML_FEATURE_ENABLED, nvml.NVML_FEATURE_ENABLED]


def test_field_values_carry_their_own_return_code_and_typed_value(h100: FakeNvml) -> None:
    """nvmlDeviceGetFieldValues: one struct per id with nvmlReturn, valueType and the value union."""
    handle = h100.nvmlDeviceGetHandleByIndex(0)
    h100.set_recovery_action(0, 2)
    memory, action, unknown = h100.nvmlDeviceGetFieldValues(
        handle, [nvml.NVML_FI_DEV_MEMORY_TEMP, nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 9999]
    )
    assert action.nvmlReturn == nvml.NVML_SUCCESS
    assert action.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert action.value.uiVal == 2
    assert action.value.ullVal == 2
    assert memory.nvmlReturn == nvml.NVML_SUCCESS
    assert memory.value.uiVal > 20
    assert unknown.nvmlReturn == nvml.NVML_ERROR_NOT_SUPPORTED


def test_a100_pcie_has_no_nvlink_but_remaps_rows() -> None:
    """PCIe board: NVLink link 0 is NOT_SUPPORTED; Ampere: row remapping answers, page retirement not."""
    fake = FakeNvml("a100_pcie", seed=1)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(handle, 0)
    assert fake.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    assert fake.nvmlDeviceGetEnforcedPowerLimit(handle) == 300_000
    assert fake.nvmlDeviceGetMaxPcieLinkGeneration(handle) == 4


def test_v100_retires_pages_and_does_not_remap_rows() -> None:
    """Pre-Ampere: remapped rows NOT_SUPPORTED, retired pages listed per cause, no recovery-action field."""
    fake = FakeNvml("v100_sxm2", seed=1)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.set_retired_pages(0, double_bit=2, single_bit=1, pending=True)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRemappedRows(handle)
    dbe = fake.nvmlDeviceGetRetiredPages(handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    assert len(dbe) == 2
    sbe = fake.nvmlDeviceGetRetiredPages(
        handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    assert len(sbe) == 1
    assert fake.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED
    (action,) = fake.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    assert action.nvmlReturn == nvml.NVML_ERROR_NOT_SUPPORTED
    assert fake.nvmlSystemGetDriverVersion().startswith("535.")


def test_mig_makes_row_remapping_not_supported(h100: FakeNvml) -> None:
    """NVML documents nvmlDeviceGetRemappedRows as NOT_SUPPORTED with MIG enabled."""
    handle = h100.nvmlDeviceGetHandleByIndex(1)
    h100.enable_mig(1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        h100.nvmlDeviceGetRemappedRows(handle)
    h100.enable_mig(1, enabled=False)
    assert h100.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)


def test_a_function_missing_from_the_driver_raises_function_not_found() -> None:
    """Like pynvml on an older libnvidia-ml: the symbol is absent, so FUNCTION_NOT_FOUND."""
    fake = FakeNvml(seed=0, missing_functions={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert fake.nvmlDeviceGetCurrentClocksThrottleReasons(handle) == CLOCKS_EVENT_REASONS["gpu_idle"]


def test_a_handle_from_another_fake_node_is_an_invalid_argument(h100: FakeNvml) -> None:
    """Handles belong to one node's NVML; using one elsewhere is INVALID_ARGUMENT."""
    other = FakeNvml(seed=8)
    other.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        h100.nvmlDeviceGetUUID(other.nvmlDeviceGetHandleByIndex(0))


def test_handles_are_stable_per_gpu(h100: FakeNvml) -> None:
    """NVML returns the same device pointer on every lookup; the watcher relies on it."""
    assert h100.nvmlDeviceGetHandleByIndex(3) is h100.nvmlDeviceGetHandleByIndex(3)
    assert isinstance(h100.nvmlDeviceGetHandleByIndex(3), FakeDeviceHandle)


# --- identities -----------------------------------------------------------------------------------------


def test_uuids_are_deterministic_per_seed_and_distinct_across_nodes() -> None:
    """Same seed and node -> same UUIDs; other node or no seed -> other UUIDs; bus ids repeat."""
    first = FakeNvml(seed=3, node_name="n1")
    again = FakeNvml(seed=3, node_name="n1")
    other_node = FakeNvml(seed=3, node_name="n2")
    unseeded_a, unseeded_b = FakeNvml(), FakeNvml()
    assert first.gpu_uuids == again.gpu_uuids
    assert len(set(first.gpu_uuids)) == 8
    assert not set(first.gpu_uuids) & set(other_node.gpu_uuids)
    assert not set(unseeded_a.gpu_uuids) & set(unseeded_b.gpu_uuids)
    assert [gpu.pci_bus_id for gpu in map(first.gpu, range(8))] == [
        gpu.pci_bus_id for gpu in map(other_node.gpu, range(8))
    ]


def test_unknown_profile_gpu_and_reason_are_clear_errors() -> None:
    """Bad fault-script input raises FakeNvmlError naming what is wrong."""
    with pytest.raises(FakeNvmlError, match="unknown fake GPU profile"):
        FakeNvml("b200")
    fake = FakeNvml(seed=0)
    with pytest.raises(FakeNvmlError, match="no fake GPU 9"):
        fake.inject_xid(9, 79)
    with pytest.raises(FakeNvmlError, match="unknown clocks event reasons"):
        fake.throttle(0, "too_hot")
    with pytest.raises(FakeNvmlError, match="no pynvml function"):
        fake.fail_call(0, "nvmlDeviceGetWhatever")
    with pytest.raises(FakeNvmlError, match="NVLink links"):
        FakeNvml("a100_pcie", seed=0).nvlink_down(0, 0)


def test_profiles_cover_the_four_documented_boards() -> None:
    """h100_sxm, h200_sxm, a100_pcie and v100_sxm2 exist with their distinguishing traits."""
    assert PROFILES["h100_sxm"].nvlink_links == PROFILES["h200_sxm"].nvlink_links == 18
    assert PROFILES["a100_pcie"].nvlink_links == 0
    assert PROFILES["v100_sxm2"].page_retirement
    assert not PROFILES["v100_sxm2"].row_remapping


# --- faults ---------------------------------------------------------------------------------------------


def test_a_lost_gpu_answers_gpu_is_lost_to_everything(h100: FakeNvml) -> None:
    """Fell off the bus: handle lookup and every query on an old handle raise NVMLError_GpuIsLost."""
    handle = h100.nvmlDeviceGetHandleByIndex(4)
    h100.lose_gpu(4)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        h100.nvmlDeviceGetHandleByIndex(4)
    for query in (h100.nvmlDeviceGetUUID, h100.nvmlDeviceGetPowerUsage, h100.nvmlDeviceGetRemappedRows):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            query(handle)
    assert h100.nvmlDeviceGetCount() == 8  # still enumerated
    assert h100.nvmlDeviceGetUUID(h100.nvmlDeviceGetHandleByIndex(5)) == h100.gpu_uuids[5]


def test_a_lost_gpu_can_keep_a_readable_handle_when_asked(h100: FakeNvml) -> None:
    """handle_lookup_fails=False: lost between handle lookup and the reads."""
    h100.lose_gpu(2, handle_lookup_fails=False)
    handle = h100.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        h100.nvmlDeviceGetUUID(handle)


def test_a_removed_gpu_is_no_longer_enumerated_and_later_indices_shift(h100: FakeNvml) -> None:
    """remove_gpu: count drops, NVML renumbers the remaining GPUs."""
    h100.remove_gpu(2)
    assert h100.nvmlDeviceGetCount() == 7
    assert h100.nvmlDeviceGetUUID(h100.nvmlDeviceGetHandleByIndex(2)) == h100.gpu_uuids[3]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        h100.nvmlDeviceGetHandleByIndex(7)


def test_fail_gpu_and_fail_call_inject_errors(h100: FakeNvml) -> None:
    """fail_gpu: every query raises the code; fail_call: one function raises it on one GPU."""
    h100.fail_gpu(1, nvml.NVML_ERROR_UNKNOWN)
    h100.fail_call(2, "nvmlDeviceGetPowerUsage", nvml.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(pynvml.NVMLError_Unknown):
        h100.nvmlDeviceGetUUID(h100.nvmlDeviceGetHandleByIndex(1))
    second = h100.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        h100.nvmlDeviceGetPowerUsage(second)
    assert h100.nvmlDeviceGetTemperatureV(second, nvml.NVML_TEMPERATURE_GPU) > 0


def test_ecc_volatile_rise_also_raises_the_aggregate(h100: FakeNvml) -> None:
    """Aggregate counts include volatile ones: a new DBE shows in both."""
    handle = h100.nvmlDeviceGetHandleByIndex(0)
    h100.set_ecc_dbe(0, volatile=2)
    unc = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert h100.nvmlDeviceGetTotalEccErrors(handle, unc, nvml.NVML_VOLATILE_ECC) == 2
    assert h100.nvmlDeviceGetTotalEccErrors(handle, unc, nvml.NVML_AGGREGATE_ECC) == 2
    h100.set_ecc_dbe(0, aggregate=10)
    assert h100.nvmlDeviceGetTotalEccErrors(handle, unc, nvml.NVML_AGGREGATE_ECC) == 10


def test_throttle_sets_the_documented_bits_and_clears_idle(h100: FakeNvml) -> None:
    """HwThermal 0x40 | HwPowerBrake 0x80, and a throttled GPU is no longer idle (0x1)."""
    h100.throttle(0, "hw_thermal", "hw_power_brake")
    assert h100.nvmlDeviceGetCurrentClocksEventReasons(h100.nvmlDeviceGetHandleByIndex(0)) == 0xC0


def test_pcie_and_nvlink_faults_show_in_their_queries(h100: FakeNvml) -> None:
    """degrade_pcie lowers the current width only; nvlink_down and error counters per link."""
    handle = h100.nvmlDeviceGetHandleByIndex(6)
    h100.degrade_pcie(6, width=8)
    h100.add_pcie_replays(6, 12)
    h100.nvlink_down(6, 3)
    h100.add_nvlink_errors(6, 4, replay=1, recovery=2, crc=3)
    assert h100.nvmlDeviceGetCurrPcieLinkWidth(handle) == 8
    assert h100.nvmlDeviceGetMaxPcieLinkWidth(handle) == 16
    assert h100.nvmlDeviceGetPcieReplayCounter(handle) == 12
    assert h100.nvmlDeviceGetNvLinkState(handle, 3) == nvml.NVML_FEATURE_DISABLED
    assert h100.nvmlDeviceGetNvLinkErrorCounter(handle, 4, nvml.NVML_NVLINK_ERROR_DL_RECOVERY) == 2
    assert h100.nvmlDeviceGetNvLinkErrorCounter(handle, 4, nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 3


def test_gpu_reset_clears_volatile_state_and_keeps_history(h100: FakeNvml) -> None:
    """A reset clears volatile ECC, applies a pending remap, clears the recovery action; aggregates stay."""
    handle = h100.nvmlDeviceGetHandleByIndex(0)
    h100.set_ecc_dbe(0, volatile=1)
    h100.set_row_remap(0, pending=True, uncorrectable=1)
    h100.set_recovery_action(0, 1)
    h100.nvlink_down(0, 0)
    h100.reset_gpu(0)
    unc = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert h100.nvmlDeviceGetTotalEccErrors(handle, unc, nvml.NVML_VOLATILE_ECC) == 0
    assert h100.nvmlDeviceGetTotalEccErrors(handle, unc, nvml.NVML_AGGREGATE_ECC) == 1
    assert h100.nvmlDeviceGetRemappedRows(handle) == (0, 1, 0, 0)
    (action,) = h100.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    assert action.value.uiVal == 0
    assert h100.nvmlDeviceGetNvLinkState(handle, 0) == nvml.NVML_FEATURE_ENABLED


def test_a_lost_gpu_cannot_be_reset_but_a_reboot_brings_it_back(h100: FakeNvml) -> None:
    """Reset on a GPU off the bus fails with GPU_IS_LOST; reboot restores it and needs a new nvmlInit."""
    h100.lose_gpu(5)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        h100.reset_gpu(5)
    h100.reboot()
    h100.nvmlInit()
    assert h100.nvmlDeviceGetUUID(h100.nvmlDeviceGetHandleByIndex(5)) == h100.gpu_uuids[5]


def test_clear_faults_repairs_link_and_injected_failures(h100: FakeNvml) -> None:
    """clear_faults: back on the bus, full PCIe width, no injected call errors."""
    h100.degrade_pcie(1, width=4, gen=3)
    h100.fail_call(1, "nvmlDeviceGetPowerUsage", nvml.NVML_ERROR_UNKNOWN)
    h100.lose_gpu(1, emit_xid=False)
    h100.clear_faults(1)
    handle = h100.nvmlDeviceGetHandleByIndex(1)
    assert h100.nvmlDeviceGetCurrPcieLinkWidth(handle) == 16
    assert h100.nvmlDeviceGetCurrPcieLinkGeneration(handle) == 5
    assert h100.nvmlDeviceGetPowerUsage(handle) > 0


# --- events ---------------------------------------------------------------------------------------------


def test_event_wait_times_out_when_nothing_is_pending(h100: FakeNvml) -> None:
    """nvmlEventSetWait raises NVMLError_Timeout after about timeoutms."""
    event_set = h100.nvmlEventSetCreate()
    h100.nvmlDeviceRegisterEvents(
        h100.nvmlDeviceGetHandleByIndex(0), nvml.nvmlEventTypeXidCriticalError, event_set
    )
    began = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        h100.nvmlEventSetWait(event_set, 30)
    assert 0.02 <= time.monotonic() - began < 2.0


def test_injected_xid_reaches_every_set_the_gpu_is_registered_with(h100: FakeNvml) -> None:
    """Event data as pynvml's: eventType XidCriticalError, eventData the XID, device the GPU's handle."""
    handle = h100.nvmlDeviceGetHandleByIndex(2)
    sets = [h100.nvmlEventSetCreate(), h100.nvmlEventSetCreate()]
    for event_set in sets:
        h100.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
    assert h100.inject_xid(2, 48, "DBE (0x1) has been detected")
    for event_set in sets:
        data = h100.nvmlEventSetWait(event_set, 100)
        assert (data.eventData, data.eventType, data.device) == (
            48,
            nvml.nvmlEventTypeXidCriticalError,
            handle,
        )
    assert h100.xid_history[-1].message == "DBE (0x1) has been detected"
    assert h100.xid_history[-1].pci_bus_id == "00000000:3A:00.0"


def test_losing_a_gpu_emits_xid_79_then_gpu_is_lost_once(h100: FakeNvml) -> None:
    """A watched GPU falling off the bus: XID 79 event, then one GPU_IS_LOST, then the set carries on."""
    event_set = h100.nvmlEventSetCreate()
    for index in (1, 3):
        h100.nvmlDeviceRegisterEvents(
            h100.nvmlDeviceGetHandleByIndex(index), nvml.nvmlEventTypeXidCriticalError, event_set
        )
    h100.lose_gpu(3)
    assert not h100.inject_xid(3, 13)  # a lost GPU reports nothing more
    h100.inject_xid(1, 31)
    assert h100.nvmlEventSetWait(event_set, 100).eventData == 79
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        h100.nvmlEventSetWait(event_set, 100)
    assert h100.nvmlEventSetWait(event_set, 100).eventData == 31


def test_a_freed_event_set_is_rejected(h100: FakeNvml) -> None:
    """Using an event set after nvmlEventSetFree is INVALID_ARGUMENT."""
    event_set = h100.nvmlEventSetCreate()
    h100.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        h100.nvmlEventSetWait(event_set, 10)


@pytest.mark.timeout(20)
def test_concurrent_injection_and_waiting_lose_no_event(h100: FakeNvml) -> None:
    """Thread safety: 4 injecting threads and 1 waiting thread; every XID arrives exactly once."""
    event_set = h100.nvmlEventSetCreate()
    for index in range(8):
        h100.nvmlDeviceRegisterEvents(
            h100.nvmlDeviceGetHandleByIndex(index), nvml.nvmlEventTypeXidCriticalError, event_set
        )
    received: list[int] = []

    def wait_all() -> None:
        while len(received) < 400:
            try:
                received.append(h100.nvmlEventSetWait(event_set, 50).eventData)
            except nvml.NVMLError:
                continue

    def inject(offset: int) -> None:
        for n in range(100):
            h100.inject_xid(n % 8, 1000 * offset + n)
            h100.nvmlDeviceGetPowerUsage(h100.nvmlDeviceGetHandleByIndex(n % 8))

    waiter = threading.Thread(target=wait_all)
    injectors = [threading.Thread(target=inject, args=(offset,)) for offset in range(4)]
    for thread in (waiter, *injectors):
        thread.start()
    for thread in (*injectors, waiter):
        thread.join(HANG_GUARD_S)
    assert sorted(received) == sorted(1000 * offset + n for offset in range(4) for n in range(100))
