# ruff: noqa: N802, N803  -- the fake mirrors pynvml's camelCase function and argument names
"""A stateful fake of the ``pynvml`` surface gpuhealth uses, for tests, the demo and the simulator.

``FakeNvml(profile="h100_sxm", gpu_count=8, seed=1)`` is one node's NVML: it has the same function names,
argument names and return shapes as ``pynvml`` (nvidia-ml-py 13), raises the REAL ``pynvml.NVMLError_*``
classes (obtained through :mod:`agent.backends.nvml.seam`; this module never imports ``pynvml``), and encodes
documented NVML behaviour:

* every call but ``nvmlInit`` raises UNINITIALIZED until ``nvmlInit`` (init is reference counted);
* a missing driver raises LIBRARY_NOT_FOUND (or the code given to :meth:`FakeNvml.fail_init`) at init;
* row remapping is NOT_SUPPORTED before Ampere and with MIG enabled; page retirement is NOT_SUPPORTED from
  Ampere on (row remapping replaced it); NVLink is NOT_SUPPORTED on PCIe boards and beyond the last link;
* every call on a lost GPU raises GPU_IS_LOST, and so does looking up its handle by index;
* ``nvmlEventSetWait`` blocks up to its timeout and raises TIMEOUT when nothing is pending.

Fault injection is scripted with methods (``inject_xid``, ``lose_gpu``, ``set_row_remap`` ...); each takes
a GPU as its slot number (its index when the fake was built, stable even after ``remove_gpu``) or its
UUID. Everything is guarded by one lock: the watcher thread and the agent loop call in concurrently.

The GPU models are data in :mod:`sim.fakes.profiles`, one GPU's state is
:class:`sim.fakes.gpu.FakeGpu`, and the values handed out are in :mod:`sim.fakes.structs`.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final, NoReturn

from agent.backends.nvml import seam as nvml
from core.recovery_message import recovery_change_from_message
from sim.fakes.gpu import CLOCKS_EVENT_REASONS, FakeGpu, FakeLink, new_gpu
from sim.fakes.load import apply_load
from sim.fakes.profiles import PROFILES
from sim.fakes.structs import (
    FakeDeviceHandle,
    FakeEventData,
    FakeEventSet,
    FakeFieldValue,
    FakePciInfo,
    FakeProcessInfo,
    FakeUtilization,
    FakeValue,
    InjectedXid,
)

_FAKE_NODE_NUMBERS = itertools.count()  # only to tell apart fakes built without a seed
# NVML's NVLink error counter -> the FakeLink field it reads (looked up, not rebuilt, on each call)
_NVLINK_COUNTERS: dict[int, Callable[[FakeLink], int]] = {
    nvml.NVML_NVLINK_ERROR_DL_REPLAY: lambda link: link.replay,
    nvml.NVML_NVLINK_ERROR_DL_RECOVERY: lambda link: link.recovery,
    nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: lambda link: link.crc_flit,
    nvml.NVML_NVLINK_ERROR_DL_CRC_DATA: lambda link: link.crc_data,
}

XID_FELL_OFF_THE_BUS: Final[int] = 79
XID_RECOVERY_ACTION_CHANGED: Final[int] = 154


class FakeNvmlError(ValueError):
    """The fake was asked for something it does not have (an unknown profile, GPU or reason)."""


def _raise(code: int) -> NoReturn:
    raise nvml.nvml_error(code)


def _feature(enabled: bool) -> int:
    """NVML's answer for an on/off state (nvmlEnableState_t)."""
    return nvml.NVML_FEATURE_ENABLED if enabled else nvml.NVML_FEATURE_DISABLED


class FakeNvml:
    """One node's NVML, stateful: pass it as the ``library`` of NvmlBackend and XidWatcher.

    ``seed`` fixes UUIDs (with ``node_name``); without one, each fake in the process gets distinct UUIDs.
    PCI bus ids follow the profile's board layout, so they repeat across nodes, as on real fleets.
    ``calls`` counts every pynvml function called, by name.
    """

    def __init__(
        self,
        profile: str = "h100_sxm",
        gpu_count: int | None = None,
        *,
        seed: int | str | None = None,
        node_name: str = "fake-node",
        driver_missing: bool = False,
        missing_functions: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        if profile not in PROFILES:
            raise FakeNvmlError(f"unknown fake GPU profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
        chosen = PROFILES[profile]
        count = chosen.default_gpu_count if gpu_count is None else gpu_count
        if not 0 <= count <= 64:
            raise FakeNvmlError(f"gpu_count must be between 0 and 64, got {gpu_count}")
        self.profile = replace(
            chosen, missing_functions=chosen.missing_functions | frozenset(missing_functions)
        )
        self.node_name = node_name
        self._id = next(_FAKE_NODE_NUMBERS)
        effective_seed = seed if seed is not None else f"unseeded-{self._id}"
        self._gpus = [new_gpu(self.profile, effective_seed, node_name, slot) for slot in range(count)]
        self._handles = [FakeDeviceHandle(self._id, slot) for slot in range(count)]
        self._lock = threading.RLock()
        self.hang: threading.Event | None = None
        """Set to an event and every pynvml call blocks until it is set, as NVML does on a GPU that is falling
        off the bus: the watchdog's fault. The hang holds the library's lock, so calls from other threads (the
        XID watcher) wait behind it, as they do on a real driver."""
        self._events_changed = threading.Condition(self._lock)
        self._event_sets: list[FakeEventSet] = []
        self._init_count = 0
        self._waits_interrupted = False
        self._init_failure: int | None = nvml.NVML_ERROR_LIBRARY_NOT_FOUND if driver_missing else None
        self.calls: Counter[str] = Counter()
        self.xid_history: list[InjectedXid] = []

    # --- helpers ---------------------------------------------------------------------------------------

    @property
    def gpu_uuids(self) -> list[str]:
        """UUIDs of every GPU slot, enumerated or not, in slot order."""
        return [gpu.uuid for gpu in self._gpus]

    @property
    def initialised(self) -> bool:
        """Whether nvmlInit has been called more often than nvmlShutdown."""
        with self._lock:
            return self._init_count > 0

    def gpu(self, gpu: int | str) -> FakeGpu:
        """The state of one GPU, by slot number or UUID (read it; change it through the methods)."""
        for candidate in self._gpus:
            if gpu in (candidate.slot, candidate.uuid):
                return candidate
        raise FakeNvmlError(f"no fake GPU {gpu!r} on {self.node_name}")

    def _enter(self, function: str) -> None:
        """Bookkeeping every pynvml call shares: count it, then the init and missing-function checks."""
        self.calls[function] += 1
        hang = self.hang
        if hang is not None:
            hang.wait()  # under the lock, as the driver holds its own: every other call waits too
        if self._init_count == 0:
            _raise(nvml.NVML_ERROR_UNINITIALIZED)
        if function in self.profile.missing_functions:
            _raise(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _device(self, handle: object, function: str) -> FakeGpu:
        """The GPU behind a handle, after the checks NVML makes for every device query."""
        self._enter(function)
        if not isinstance(handle, FakeDeviceHandle) or handle.node != self._id:
            _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[handle.slot]
        if gpu.lost or not gpu.enumerated:
            _raise(nvml.NVML_ERROR_GPU_IS_LOST)
        if gpu.failing_code is not None:
            _raise(gpu.failing_code)
        if function in gpu.call_errors:
            _raise(gpu.call_errors[function])
        return gpu

    def _enumerated(self) -> list[FakeGpu]:
        return [gpu for gpu in self._gpus if gpu.enumerated]

    # --- pynvml: library and system --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        """Reference-counted like NVML's; raises the configured failure when the driver is missing."""
        with self._lock:
            self.calls["nvmlInit"] += 1
            if self._init_failure is not None:
                _raise(self._init_failure)
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        """Gives back one nvmlInit reference."""
        with self._lock:
            self._enter("nvmlShutdown")
            self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """The profile's driver version (``str``, as nvidia-ml-py 12+ returns it)."""
        with self._lock:
            self._enter("nvmlSystemGetDriverVersion")
            return self.profile.driver_version

    def nvmlDeviceGetCount(self) -> int:
        """GPUs enumerated now (a removed GPU is not; a lost one still is)."""
        with self._lock:
            self._enter("nvmlDeviceGetCount")
            return len(self._enumerated())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDeviceHandle:
        """The handle of the index-th enumerated GPU; GPU_IS_LOST for a GPU that fell off the bus."""
        with self._lock:
            self._enter("nvmlDeviceGetHandleByIndex")
            present = self._enumerated()
            if not 0 <= index < len(present):
                _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = present[index]
            if gpu.lost and gpu.lookup_fails_when_lost:
                _raise(nvml.NVML_ERROR_GPU_IS_LOST)
            return self._handles[gpu.slot]

    # --- pynvml: device queries ------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetSerial(self, handle: object) -> str:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetSerial").serial

    def nvmlDeviceGetName(self, handle: object) -> str:
        with self._lock:
            self._device(handle, "nvmlDeviceGetName")
            return self.profile.name

    def nvmlDeviceGetPciInfo(self, handle: object) -> FakePciInfo:
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetPciInfo")
            return FakePciInfo(
                busId=gpu.pci_bus_id,
                busIdLegacy=f"0000:{gpu.bus_number:02X}:00.0",
                domain=0,
                bus=gpu.bus_number,
                device=0,
                pciDeviceId=self.profile.pci_device_id,
                pciSubSystemId=0x16C110DE,
            )

    def nvmlDeviceGetPersistenceMode(self, handle: object) -> int:
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetPersistenceMode")
            return _feature(gpu.persistence_mode)

    def nvmlDeviceGetTemperatureV(
        self, handle: object, sensor: int, version: int = nvml.nvmlTemperature_v1
    ) -> int:
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetTemperatureV")
            if version != nvml.nvmlTemperature_v1:
                _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
            return self._temperature(gpu, sensor)

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        with self._lock:
            return self._temperature(self._device(handle, "nvmlDeviceGetTemperature"), sensor)

    @staticmethod
    def _temperature(gpu: FakeGpu, sensor: int) -> int:
        if sensor != nvml.NVML_TEMPERATURE_GPU:
            _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        """Milliwatts."""
        with self._lock:
            return self._device(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        """Milliwatts."""
        with self._lock:
            return self._device(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetCurrentClocksEventReasons").clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        """The deprecated name of nvmlDeviceGetCurrentClocksEventReasons (same bitmask)."""
        with self._lock:
            return self._device(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clocks_event_reasons

    def nvmlDeviceGetClockInfo(self, handle: object, type: int) -> int:  # noqa: A002 -- pynvml's name
        """MHz; the fake keeps one clock domain, the SM's (the graphics clock follows it)."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetClockInfo")
            if type not in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_GRAPHICS):
                _raise(nvml.NVML_ERROR_NOT_SUPPORTED)
            return gpu.sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle: object, type: int) -> int:  # noqa: A002 -- pynvml's name
        """MHz, the board's highest SM (graphics) clock."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetMaxClockInfo")
            if type not in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_GRAPHICS):
                _raise(nvml.NVML_ERROR_NOT_SUPPORTED)
            return gpu.max_sm_clock_mhz

    def nvmlDeviceGetVbiosVersion(self, handle: object) -> str:
        with self._lock:
            self._device(handle, "nvmlDeviceGetVbiosVersion")
            return self.profile.vbios_version

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> FakeUtilization:
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetUtilizationRates")
            return FakeUtilization(gpu=gpu.utilization_pct, memory=gpu.utilization_pct // 2)

    def nvmlDeviceGetEccMode(self, handle: object) -> list[int]:
        """[current, pending] mode."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetEccMode")
            mode = _feature(gpu.ecc_enabled)
            return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, handle: object, errorType: int, counterType: int) -> int:
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetTotalEccErrors")
            if (errorType, counterType) not in gpu.ecc:
                _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
            return gpu.ecc[(errorType, counterType)]

    def nvmlDeviceGetRemappedRows(self, device: object) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure); Ampere and newer, not with MIG enabled."""
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetRemappedRows")
            if not self.profile.row_remapping or gpu.mig_enabled:
                _raise(nvml.NVML_ERROR_NOT_SUPPORTED)
            return (
                gpu.remapped_correctable,
                gpu.remapped_uncorrectable,
                int(gpu.remap_pending),
                int(gpu.remap_failure),
            )

    def nvmlDeviceGetRetiredPages(self, device: object, sourceFilter: int) -> list[int]:
        """Addresses of the pages retired for one cause; before Ampere only."""
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetRetiredPages")
            self._require_page_retirement()
            if sourceFilter == nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
                count, base = gpu.retired_single_bit, 0x1000
            elif sourceFilter == nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
                count, base = gpu.retired_double_bit, 0x8000
            else:
                _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
            return [base + page for page in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: object) -> int:
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetRetiredPagesPendingStatus")
            self._require_page_retirement()
            return _feature(gpu.retirement_pending)

    def _require_page_retirement(self) -> None:
        if not self.profile.page_retirement:
            _raise(nvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetCurrPcieLinkGeneration").pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetCurrPcieLinkWidth").pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        with self._lock:
            self._device(handle, "nvmlDeviceGetMaxPcieLinkGeneration")
            return self.profile.pcie_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        with self._lock:
            self._device(handle, "nvmlDeviceGetMaxPcieLinkWidth")
            return self.profile.pcie_width

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        with self._lock:
            return self._device(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replays

    def nvmlDeviceGetNvLinkState(self, device: object, link: int) -> int:
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetNvLinkState")
            active = self._link(gpu, link).active
            return _feature(active)

    def nvmlDeviceGetNvLinkErrorCounter(self, device: object, link: int, counter: int) -> int:
        with self._lock:
            state = self._link(self._device(device, "nvmlDeviceGetNvLinkErrorCounter"), link)
            read = _NVLINK_COUNTERS.get(counter)
            if read is None:
                _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
            return read(state)

    @staticmethod
    def _link(gpu: FakeGpu, link: int) -> FakeLink:
        if not 0 <= link < nvml.NVML_NVLINK_MAX_LINKS:
            _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(gpu.links):
            _raise(nvml.NVML_ERROR_NOT_SUPPORTED)  # a PCIe board, or past this GPU's last link
        return gpu.links[link]

    def nvmlDeviceGetFieldValues(self, handle: object, fieldIds: list[int]) -> list[FakeFieldValue]:
        """One value per field id; a field the GPU or driver lacks answers NOT_SUPPORTED in nvmlReturn."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetFieldValues")
            return [self._field_value(gpu, field_id) for field_id in fieldIds]

    def _field_value(self, gpu: FakeGpu, field_id: int) -> FakeFieldValue:
        known = {
            nvml.NVML_FI_DEV_MEMORY_TEMP: (self.profile.memory_temperature, gpu.memory_temperature_c),
            nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (
                self.profile.recovery_action_field,
                gpu.recovery_action,
            ),
        }
        supported, number = known.get(field_id, (False, 0))
        return FakeFieldValue(
            fieldId=field_id,
            scopeId=0,
            timestamp=int(time.time() * 1_000_000),
            latencyUsec=0,
            valueType=nvml.NVML_VALUE_TYPE_UNSIGNED_INT,
            nvmlReturn=nvml.NVML_SUCCESS if supported else nvml.NVML_ERROR_NOT_SUPPORTED,
            value=FakeValue.of(number if supported else 0),
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[FakeProcessInfo]:
        """The compute processes using the GPU now (see :meth:`start_process`)."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceGetComputeRunningProcesses")
            return [FakeProcessInfo(pid, used) for pid, used in sorted(gpu.processes.items())]

    def nvmlDeviceGetGpuFabricInfo(self, device: object, gpuFabricInfo: Any) -> int:
        """Fills the caller's nvmlGpuFabricInfo_t (through its reference) as NVML does; NOT_SUPPORTED where
        the profile has no NVSwitch fabric (PCIe boards, older baseboards)."""
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetGpuFabricInfo")
            if not self.profile.gpu_fabric:
                _raise(nvml.NVML_ERROR_NOT_SUPPORTED)
            info = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)
            info.state = gpu.fabric_state
            info.status = gpu.fabric_status
            info.cliqueId = gpu.fabric_clique
            return nvml.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, device: object, gpuFabricInfo: Any) -> int:
        """The versioned call (``nvmlGpuFabricInfo_v3_t``): the same fields plus the health summary. A driver
        without the first call has no versioned one either."""
        with self._lock:
            gpu = self._device(device, "nvmlDeviceGetGpuFabricInfoV")
            if "nvmlDeviceGetGpuFabricInfo" in self.profile.missing_functions:
                _raise(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if not self.profile.gpu_fabric:
                _raise(nvml.NVML_ERROR_NOT_SUPPORTED)
            info = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)
            info.state = gpu.fabric_state
            info.status = gpu.fabric_status
            info.cliqueId = gpu.fabric_clique
            info.healthSummary = gpu.fabric_health
            return nvml.NVML_SUCCESS

    # --- pynvml: events --------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        with self._lock:
            self._enter("nvmlEventSetCreate")
            event_set = FakeEventSet(node=self._id)
            self._event_sets.append(event_set)
            return event_set

    def nvmlDeviceRegisterEvents(self, handle: object, eventTypes: int, eventSet: FakeEventSet) -> None:
        """Registers a GPU's XID critical errors with a set (other event types are accepted, never fire)."""
        with self._lock:
            gpu = self._device(handle, "nvmlDeviceRegisterEvents")
            self._check_event_set(eventSet)
            if eventTypes & nvml.nvmlEventTypeXidCriticalError:
                eventSet.slots.add(gpu.slot)

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        """The next event of the set; TIMEOUT after ``timeoutms`` without one; GPU_IS_LOST once per loss."""
        with self._events_changed:
            self._enter("nvmlEventSetWait")
            self._check_event_set(eventSet)
            deadline = time.monotonic() + timeoutms / 1000.0
            while not eventSet.pending:
                if self._waits_interrupted:
                    _raise(nvml.NVML_ERROR_UNINITIALIZED)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    _raise(nvml.NVML_ERROR_TIMEOUT)
                self._events_changed.wait(remaining)
                if self._init_count == 0 or eventSet.freed:
                    _raise(nvml.NVML_ERROR_UNINITIALIZED)
            item = eventSet.pending.popleft()
            if isinstance(item, FakeDeviceHandle):
                _raise(nvml.NVML_ERROR_GPU_IS_LOST)
            return item

    def interrupt_waits(self) -> None:
        """End every ``nvmlEventSetWait`` now and from now on with NVML_ERROR_UNINITIALIZED (as after the
        driver went away): a fleet of fakes whose XID watchers wait long (``sim.scenario.agents``) calls it
        before stopping its agents, so that no watcher thread has to wait out its timeout."""
        with self._events_changed:
            self._waits_interrupted = True
            self._events_changed.notify_all()

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        with self._events_changed:
            self._enter("nvmlEventSetFree")
            self._check_event_set(eventSet)
            eventSet.freed = True
            self._event_sets.remove(eventSet)
            self._events_changed.notify_all()

    def _check_event_set(self, event_set: object) -> None:
        if not isinstance(event_set, FakeEventSet) or event_set.node != self._id or event_set.freed:
            _raise(nvml.NVML_ERROR_INVALID_ARGUMENT)

    def _post(self, gpu: FakeGpu, item: FakeEventData | FakeDeviceHandle) -> None:
        for event_set in self._event_sets:
            if gpu.slot in event_set.slots:
                event_set.pending.append(item)
        self._events_changed.notify_all()

    # --- fault injection -------------------------------------------------------------------------------

    def inject_xid(self, gpu: int | str, xid: int, message: str | None = None) -> bool:
        """An XID on one GPU: delivered to every event set it is registered with, recorded in
        ``xid_history`` (with ``message``, which NVML events do not carry). A lost or removed GPU reports
        nothing: returns False then.

        XID 154 is how a driver announces a new recovery action, and it moves the recovery-action field
        first: with a message naming the new state (``... to 0x1 (GPU Reset Required)``, or just the name),
        the field takes that value, read the same way the XID check reads a kernel-log line. An event
        alone carries no message, so the field is all an NVML reader has to go on.
        """
        with self._events_changed:
            target = self.gpu(gpu)
            if target.lost or not target.enumerated:
                return False
            if xid == XID_RECOVERY_ACTION_CHANGED:
                change = recovery_change_from_message(message)
                if change is not None and change.field_value is not None:
                    target.recovery_action = change.field_value
            self.xid_history.append(InjectedXid(target.slot, target.uuid, target.pci_bus_id, xid, message))
            event = FakeEventData(self._handles[target.slot], nvml.nvmlEventTypeXidCriticalError, xid)
            self._post(target, event)
            return True

    def set_ecc_dbe(
        self, gpu: int | str, *, volatile: int | None = None, aggregate: int | None = None
    ) -> None:
        """Uncorrectable (double-bit) ECC counts; a volatile rise also raises the aggregate count."""
        self._set_ecc(gpu, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile, aggregate)

    def set_ecc_sbe(
        self, gpu: int | str, *, volatile: int | None = None, aggregate: int | None = None
    ) -> None:
        """Correctable (single-bit) ECC counts; a volatile rise also raises the aggregate count."""
        self._set_ecc(gpu, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile, aggregate)

    def _set_ecc(self, gpu: int | str, error_type: int, volatile: int | None, aggregate: int | None) -> None:
        with self._lock:
            target = self.gpu(gpu)
            volatile_key = (error_type, nvml.NVML_VOLATILE_ECC)
            aggregate_key = (error_type, nvml.NVML_AGGREGATE_ECC)
            if volatile is not None:
                rise = max(volatile - target.ecc[volatile_key], 0)
                target.ecc[volatile_key] = volatile
                target.ecc[aggregate_key] += rise
            if aggregate is not None:
                target.ecc[aggregate_key] = aggregate

    def set_row_remap(
        self,
        gpu: int | str,
        *,
        pending: bool | None = None,
        failure: bool | None = None,
        uncorrectable: int | None = None,
        correctable: int | None = None,
    ) -> None:
        """Row-remapping state (what nvmlDeviceGetRemappedRows answers)."""
        with self._lock:
            target = self.gpu(gpu)
            if pending is not None:
                target.remap_pending = pending
            if failure is not None:
                target.remap_failure = failure
            if uncorrectable is not None:
                target.remapped_uncorrectable = uncorrectable
            if correctable is not None:
                target.remapped_correctable = correctable

    def set_retired_pages(
        self,
        gpu: int | str,
        *,
        double_bit: int | None = None,
        single_bit: int | None = None,
        pending: bool | None = None,
    ) -> None:
        """Retired page counts per cause and the pending flag (pre-Ampere profiles)."""
        with self._lock:
            target = self.gpu(gpu)
            if double_bit is not None:
                target.retired_double_bit = double_bit
            if single_bit is not None:
                target.retired_single_bit = single_bit
            if pending is not None:
                target.retirement_pending = pending

    def lose_gpu(self, gpu: int | str, *, emit_xid: bool = True, handle_lookup_fails: bool = True) -> None:
        """The GPU fell off the bus: XID 79 first (if ``emit_xid``), then every call on it answers
        GPU_IS_LOST and each event set watching it raises GPU_IS_LOST once. It stays enumerated; with
        ``handle_lookup_fails=False`` its handle can still be looked up (lost between lookup and reads)."""
        with self._events_changed:
            target = self.gpu(gpu)
            if emit_xid:
                self.inject_xid(target.slot, XID_FELL_OFF_THE_BUS, "GPU has fallen off the bus.")
            target.lost = True
            target.lookup_fails_when_lost = handle_lookup_fails
            self._post(target, self._handles[target.slot])

    def remove_gpu(self, gpu: int | str) -> None:
        """The GPU is no longer enumerated (missing after boot); the GPUs after it move down one index."""
        with self._lock:
            self.gpu(gpu).enumerated = False

    def degrade_pcie(self, gpu: int | str, width: int = 8, gen: int | None = None) -> None:
        """The link trained narrower (and/or slower) than the board's maximum."""
        with self._lock:
            target = self.gpu(gpu)
            target.pcie_width = width
            if gen is not None:
                target.pcie_gen = gen

    def add_pcie_replays(self, gpu: int | str, count: int) -> None:
        """PCIe replays happened."""
        with self._lock:
            self.gpu(gpu).pcie_replays += count

    def nvlink_down(self, gpu: int | str, link: int) -> None:
        """One NVLink link went inactive."""
        with self._lock:
            self._fake_link(gpu, link).active = False

    def add_nvlink_errors(
        self, gpu: int | str, link: int, *, replay: int = 0, recovery: int = 0, crc: int = 0
    ) -> None:
        """NVLink error counters rise (``crc`` counts as flit CRC errors)."""
        with self._lock:
            state = self._fake_link(gpu, link)
            state.replay += replay
            state.recovery += recovery
            state.crc_flit += crc

    def _fake_link(self, gpu: int | str, link: int) -> FakeLink:
        target = self.gpu(gpu)
        if not 0 <= link < len(target.links):
            raise FakeNvmlError(f"GPU {gpu!r} has {len(target.links)} NVLink links, not link {link}")
        return target.links[link]

    def run_load(self, step: int, *, busy: bool = True, intensity: float | None = None) -> None:
        """One step of a training job's life on every GPU (busy, or idle between jobs), with the healthy
        noise of a real fleet and any slow-GPU fault set below (``sim/fakes/load.py``)."""
        # The job's intensity this step, fixed by node and step (never by how many fakes the process made).
        spread = int(hashlib.sha256(f"{self.node_name}/{step}".encode()).hexdigest()[:4], 16) % 100
        level = intensity if intensity is not None else 0.8 + 0.2 * spread / 100
        with self._lock:
            for target in self._gpus:
                apply_load(
                    target, self.profile, f"{self.node_name}/{target.slot}", step, busy=busy, intensity=level
                )

    def train_down_link(self, gpu: int | str, gen: int = 3, width: int | None = None) -> None:
        """Slow-GPU fault: the PCIe link trains no higher than Gen ``gen`` x ``width`` (no XID, no error)."""
        with self._lock:
            target = self.gpu(gpu)
            target.link_ceiling = (gen, width or self.profile.pcie_width)
            target.pcie_gen = min(target.pcie_gen, gen)
            target.pcie_width = min(target.pcie_width, width or self.profile.pcie_width)

    def throttle_silently(self, gpu: int | str, factor: float = 0.6) -> None:
        """Slow-GPU fault: clocks held at ``factor`` of a healthy GPU's at load, with no reason bit set."""
        with self._lock:
            target = self.gpu(gpu)
            target.clock_factor, target.hide_clock_reasons = factor, True

    def slow_at_full_power(self, gpu: int | str, factor: float = 0.62) -> None:
        """Slow-GPU fault: the GPU draws its full power limit at load while its clocks stay at ``factor`` of
        its peers' (power cap the only reason shown)."""
        with self._lock:
            target = self.gpu(gpu)
            target.clock_factor, target.pin_power_at_limit = factor, True

    def set_clocks_event_reasons(self, gpu: int | str, mask: int) -> None:
        """The raw clocks event reasons bitmask."""
        with self._lock:
            self.gpu(gpu).clocks_event_reasons = mask

    def throttle(self, gpu: int | str, *reasons: str) -> None:
        """Clocks held down for the named reasons (keys of CLOCKS_EVENT_REASONS); a busy GPU is not idle."""
        unknown = [reason for reason in reasons if reason not in CLOCKS_EVENT_REASONS]
        if unknown:
            raise FakeNvmlError(
                f"unknown clocks event reasons {unknown}; known: {sorted(CLOCKS_EVENT_REASONS)}"
            )
        mask = 0
        for reason in reasons:
            mask |= CLOCKS_EVENT_REASONS[reason]
        self.set_clocks_event_reasons(gpu, mask)

    def fail_fabric(
        self,
        gpu: int | str,
        *,
        state: int = nvml.NVML_GPU_FABRIC_STATE_COMPLETED,
        status: int = nvml.NVML_ERROR_UNKNOWN,
        health: int | None = None,
    ) -> None:
        """The GPU's fabric registration failed (completed with an error status) or never finished; with
        ``health``, the driver's fabric health summary too (2 unhealthy, 3 limited capacity)."""
        with self._lock:
            target = self.gpu(gpu)
            target.fabric_state, target.fabric_status = state, status
            if health is not None:
                target.fabric_health = health

    def set_recovery_action(self, gpu: int | str, action: int) -> None:
        """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset."""
        with self._lock:
            self.gpu(gpu).recovery_action = action

    def set_temperature(self, gpu: int | str, gpu_c: int | None = None, memory_c: int | None = None) -> None:
        """GPU and/or memory temperature in °C."""
        with self._lock:
            target = self.gpu(gpu)
            if gpu_c is not None:
                target.temperature_c = gpu_c
            if memory_c is not None:
                target.memory_temperature_c = memory_c

    def set_power(self, gpu: int | str, watts: float) -> None:
        """Power draw in W (NVML reports mW)."""
        with self._lock:
            self.gpu(gpu).power_mw = round(watts * 1000)

    def enable_mig(self, gpu: int | str, enabled: bool = True) -> None:
        """MIG mode: row remapping becomes NOT_SUPPORTED while it is on."""
        with self._lock:
            self.gpu(gpu).mig_enabled = enabled

    def fail_gpu(self, gpu: int | str, code: int = nvml.NVML_ERROR_UNKNOWN) -> None:
        """Every query on this GPU raises ``code`` (its handle can still be looked up)."""
        with self._lock:
            self.gpu(gpu).failing_code = code

    def fail_call(self, gpu: int | str, function: str, code: int = nvml.NVML_ERROR_NOT_SUPPORTED) -> None:
        """One pynvml function raises ``code`` on this GPU (e.g. NOT_SUPPORTED, or refusing events)."""
        if not function.startswith("nvml") or not callable(getattr(self, function, None)):
            raise FakeNvmlError(f"the fake has no pynvml function {function!r}")
        with self._lock:
            self.gpu(gpu).call_errors[function] = code

    def start_process(self, gpu: int | str, pid: int, used_mib: int = 1024) -> None:
        """A compute process (a training job) starts using the GPU."""
        with self._lock:
            self.gpu(gpu).processes[pid] = used_mib * 1024 * 1024

    def end_process(self, gpu: int | str, pid: int) -> None:
        """A compute process on the GPU exits (unknown pids are ignored, as an exited one would be)."""
        with self._lock:
            self.gpu(gpu).processes.pop(pid, None)

    def reset_gpu(self, gpu: int | str) -> None:
        """What a GPU reset clears: volatile ECC counts, a pending row remap (now applied: the row was
        already counted), pending page retirement (now retired), the recovery action, NVLink state and
        counters, throttling. Aggregate counts, remapped rows, retired pages and a failed remap stay. A lost
        GPU cannot be reset (GPU_IS_LOST): it takes a reboot; nor one a process uses (IN_USE)."""
        with self._lock:
            target = self.gpu(gpu)
            if target.lost:
                _raise(nvml.NVML_ERROR_GPU_IS_LOST)
            if target.processes:
                _raise(nvml.NVML_ERROR_IN_USE)
            for error_type, counter_type in target.ecc:
                if counter_type == nvml.NVML_VOLATILE_ECC:
                    target.ecc[(error_type, counter_type)] = 0
            target.remap_pending = False
            target.retirement_pending = False
            target.recovery_action = 0
            target.links = [FakeLink() for _ in target.links]
            target.clocks_event_reasons = CLOCKS_EVENT_REASONS["gpu_idle"]
            target.fabric_state, target.fabric_status = (
                nvml.NVML_GPU_FABRIC_STATE_COMPLETED,
                nvml.NVML_SUCCESS,
            )
            target.fabric_health = min(
                target.fabric_health, 1
            )  # a reset clears a fault: healthy, if reported

    def clear_faults(self, gpu: int | str) -> None:
        """The GPU repaired: a reset, plus it is back on the bus, its PCIe link at full width and speed,
        no injected call failures, no process on it. Aggregate counters and retired/remapped history stay."""
        with self._lock:
            target = self.gpu(gpu)
            target.lost = False
            target.failing_code = None
            target.call_errors.clear()
            target.processes.clear()
            target.pcie_gen, target.pcie_width = self.profile.pcie_gen, self.profile.pcie_width
            self.reset_gpu(target.slot)

    def reboot(self) -> None:
        """Node reboot: lost GPUs come back and are reset, NVML must be initialised again.

        Removed GPUs stay missing (the hardware is gone) and a degraded PCIe link stays degraded.
        """
        with self._events_changed:
            for gpu in self._gpus:
                gpu.lost = False
                gpu.failing_code = None
                gpu.processes.clear()  # every process ended with the old boot
                self.reset_gpu(gpu.slot)
            self.reload_driver()

    # --- driver switches -------------------------------------------------------------------------------

    def set_driver_missing(self, missing: bool = True) -> None:
        """No libnvidia-ml: nvmlInit raises LIBRARY_NOT_FOUND (and any open session ends)."""
        self.fail_init(nvml.NVML_ERROR_LIBRARY_NOT_FOUND if missing else None)

    def fail_init(self, code: int | None = nvml.NVML_ERROR_DRIVER_NOT_LOADED) -> None:
        """nvmlInit raises ``code`` from now on (None restores the driver); open sessions end."""
        with self._events_changed:
            self._init_failure = code
            if code is not None:
                self._end_sessions()

    def reload_driver(self) -> None:
        """The kernel driver was reloaded: every caller gets UNINITIALIZED until it calls nvmlInit again."""
        with self._events_changed:
            self._end_sessions()

    def _end_sessions(self) -> None:
        self._init_count = 0
        for event_set in self._event_sets:
            event_set.freed = True
        self._event_sets.clear()
        self._events_changed.notify_all()
