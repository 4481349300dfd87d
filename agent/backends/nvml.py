# ruff: noqa: N802, N803  -- the NvmlLibrary protocol mirrors pynvml's own camelCase names exactly
"""The NVML backend: the ONLY module in gpuhealth that imports ``pynvml`` (nvidia-ml-py).

Three things live here:

* :class:`NvmlBackend` reads one node snapshot (format v1, see ``docs/snapshot.md``) through NVML. Every
  query is independent: a query NVML does not support becomes ``null``, a GPU that answers ``GPU_IS_LOST``
  is listed as ``lost``, and a node whose driver is missing gets ``nvml_error`` with no GPUs.
* :class:`XidWatcher` runs NVML's XID event set on a daemon thread and hands each XID to a callback or a
  queue the moment it happens; :class:`XidBuffer` holds them until the next snapshot.
* ``python -m agent.backends.nvml --probe | --watch SECONDS | --snapshot`` for checks on real hardware.

Every function receives the NVML "library" as an object (default: the real ``pynvml`` module), so tests
pass :class:`agent.backends.fake_nvml.FakeNvml` instead. The fake gets NVML's real error classes and
constants from here (:func:`nvml_error`, the ``NVML_*`` names below) and never imports ``pynvml`` itself.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import IO, Any, Final, Protocol, Self

import pynvml
import structlog

from agent.logging import configure_logging
from agent.snapshot import (
    EccCounters,
    GpuSnapshot,
    NodeSnapshot,
    NvLinkState,
    PcieLink,
    RemappedRows,
    RetiredPages,
    XidEvent,
    pci_key,
    utc_now,
)

log = structlog.get_logger(__name__)

# --- NVML constants, re-exported so that the fake and the tests never import pynvml -------------------
# A few are newer than the oldest nvidia-ml-py we accept (12.535); their values are fixed by the C ABI.
NVML_SUCCESS: Final[int] = pynvml.NVML_SUCCESS
NVML_ERROR_UNINITIALIZED: Final[int] = pynvml.NVML_ERROR_UNINITIALIZED
NVML_ERROR_INVALID_ARGUMENT: Final[int] = pynvml.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_SUPPORTED: Final[int] = pynvml.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_NO_PERMISSION: Final[int] = pynvml.NVML_ERROR_NO_PERMISSION
NVML_ERROR_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_NOT_FOUND
NVML_ERROR_DRIVER_NOT_LOADED: Final[int] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
NVML_ERROR_TIMEOUT: Final[int] = pynvml.NVML_ERROR_TIMEOUT
NVML_ERROR_LIBRARY_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
NVML_ERROR_FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
NVML_ERROR_GPU_IS_LOST: Final[int] = pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_RESET_REQUIRED: Final[int] = pynvml.NVML_ERROR_RESET_REQUIRED
NVML_ERROR_LIB_RM_VERSION_MISMATCH: Final[int] = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
NVML_ERROR_UNKNOWN: Final[int] = pynvml.NVML_ERROR_UNKNOWN

NVML_FEATURE_DISABLED: Final[int] = pynvml.NVML_FEATURE_DISABLED
NVML_FEATURE_ENABLED: Final[int] = pynvml.NVML_FEATURE_ENABLED
NVML_TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
NVML_MEMORY_ERROR_TYPE_CORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
NVML_MEMORY_ERROR_TYPE_UNCORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
NVML_VOLATILE_ECC: Final[int] = pynvml.NVML_VOLATILE_ECC
NVML_AGGREGATE_ECC: Final[int] = pynvml.NVML_AGGREGATE_ECC
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: Final[int] = (
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
)
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: Final[int] = (
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
)
NVML_NVLINK_MAX_LINKS: Final[int] = pynvml.NVML_NVLINK_MAX_LINKS
NVML_NVLINK_ERROR_DL_REPLAY: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
NVML_NVLINK_ERROR_DL_RECOVERY: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
NVML_NVLINK_ERROR_DL_CRC_FLIT: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
NVML_NVLINK_ERROR_DL_CRC_DATA: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA
NVML_FI_DEV_MEMORY_TEMP: Final[int] = getattr(pynvml, "NVML_FI_DEV_MEMORY_TEMP", 82)
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: Final[int] = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)
NVML_VALUE_TYPE_DOUBLE: Final[int] = pynvml.NVML_VALUE_TYPE_DOUBLE
NVML_VALUE_TYPE_UNSIGNED_INT: Final[int] = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
NVML_VALUE_TYPE_UNSIGNED_LONG: Final[int] = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: Final[int] = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
NVML_VALUE_TYPE_SIGNED_LONG_LONG: Final[int] = pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG
NVML_VALUE_TYPE_SIGNED_INT: Final[int] = pynvml.NVML_VALUE_TYPE_SIGNED_INT
NVML_VALUE_TYPE_UNSIGNED_SHORT: Final[int] = getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6)
nvmlEventTypeXidCriticalError: Final[int] = pynvml.nvmlEventTypeXidCriticalError  # noqa: N816 (pynvml's name)
nvmlTemperature_v1: Final[int] = getattr(pynvml, "nvmlTemperature_v1", 0x100000C)  # noqa: N816 (pynvml's name)

NVMLError: Final[type[Exception]] = pynvml.NVMLError
"""The base class of every error NVML raises (``pynvml.NVMLError``); subclasses per code."""

# Codes that mean "this GPU, driver or binding does not offer that": the field is null, nothing is wrong.
NOT_AVAILABLE_CODES: Final[frozenset[int]] = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_FOUND}
)

_ERROR_NAMES: Final[dict[int, str]] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}

# Where a field value keeps its number, by the value type NVML reports (the c_nvmlValue_t union).
_VALUE_ATTRIBUTE: Final[dict[int, str]] = {
    NVML_VALUE_TYPE_DOUBLE: "dVal",
    NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

_INIT_FAILURE_MESSAGES: Final[dict[int, str]] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "NVML library libnvidia-ml.so.1 not found: the NVIDIA driver is not installed, or the container "
        "was not started with the NVIDIA container runtime"
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)",
    NVML_ERROR_NO_PERMISSION: "no permission to use NVML: check access to /dev/nvidia* (NVML: No Permission)",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "the NVML library and the loaded kernel driver differ in version (driver upgraded without a reboot?)"
    ),
}

LOST_UUID_PREFIX: Final[str] = "GPU-LOST-index-"
UNREADABLE_UUID_PREFIX: Final[str] = "GPU-UNREADABLE-index-"
MAX_WATCH_TIMEOUT_MS: Final[int] = 200


def nvml_error(code: int) -> Exception:
    """The real ``pynvml.NVMLError_*`` instance for an NVML return code (e.g. NVMLError_GpuIsLost for 15)."""
    error: Exception = pynvml.NVMLError(code)
    return error


def error_code(error: BaseException) -> int | None:
    """The NVML return code carried by an NVMLError, or None for any other exception."""
    value = getattr(error, "value", None)
    return value if isinstance(error, NVMLError) and isinstance(value, int) else None


def error_name(code: int | None) -> str:
    """NVML's name for a return code without the prefix, e.g. ``NOT_SUPPORTED``; ``CODE_<n>`` if unknown."""
    if code is None:
        return "NOT_AN_NVML_ERROR"
    return _ERROR_NAMES.get(code, f"CODE_{code}")


class NvmlBackendError(Exception):
    """Base of the errors this module raises itself."""


class NvmlUnavailableError(NvmlBackendError):
    """NVML could not be initialised or used at all (driver missing, not loaded, no permission)."""


class NvmlSettingError(NvmlBackendError, ValueError):
    """A setting given to the backend or the watcher is out of range."""


class NvmlLibrary(Protocol):
    """The part of the ``pynvml`` surface gpuhealth uses; the real module and the fake both provide it."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> Any: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = ...) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetEccMode(self, handle: Any) -> Sequence[int]: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int: ...
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[int]) -> Sequence[Any]: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any: ...
    def nvmlEventSetFree(self, eventSet: Any) -> None: ...


def real_library() -> NvmlLibrary:
    """The real ``pynvml`` module, typed as the surface we use."""
    library: NvmlLibrary = pynvml
    return library


def _text(value: object) -> str | None:
    """NVML strings: ``str`` from current nvidia-ml-py, ``bytes`` from older releases."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


# --- XID buffer ----------------------------------------------------------------------------------------


class XidBuffer:
    """Thread-safe holding area for XIDs between two snapshots (the watcher appends, snapshot() drains).

    Bounded, so that an XID storm cannot eat the agent's memory: beyond ``maxlen`` the oldest are dropped
    and counted in :attr:`dropped`.
    """

    def __init__(self, maxlen: int = 1024) -> None:
        if maxlen < 1:
            raise NvmlSettingError(f"XidBuffer maxlen must be at least 1, got {maxlen}")
        self._events: deque[XidEvent] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._dropped = 0

    def append(self, event: XidEvent) -> None:
        """Keep one event (called from the watcher thread)."""
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self._dropped += 1
            self._events.append(event)

    __call__ = append  # so a buffer can be handed to XidWatcher as its callback

    def drain(self, gpu_uuid: str) -> list[XidEvent]:
        """Remove and return the events of one GPU, oldest first."""
        with self._lock:
            taken = [event for event in self._events if event.gpu_uuid == gpu_uuid]
            kept = [event for event in self._events if event.gpu_uuid != gpu_uuid]
            self._events.clear()
            self._events.extend(kept)
        return taken

    def drain_all(self) -> list[XidEvent]:
        """Remove and return every event, oldest first."""
        with self._lock:
            taken = list(self._events)
            self._events.clear()
        return taken

    @property
    def dropped(self) -> int:
        """How many events were dropped because the buffer was full."""
        with self._lock:
            return self._dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


# --- Reading one GPU -----------------------------------------------------------------------------------


class _GpuLost(Exception):
    """NVML said GPU_IS_LOST: stop reading this GPU."""


class _NvmlUninitialised(Exception):
    """NVML said UNINITIALIZED mid-snapshot (driver reloaded): initialise again and start over."""


class _FunctionMissing(Exception):
    """The binding or the driver lacks this function; a caller may fall back to an older one."""


@dataclass(frozen=True, slots=True)
class _Answer:
    value: Any = None
    code: int | None = None  # None when NVML answered with a value

    @property
    def ok(self) -> bool:
        return self.code is None


@dataclass(frozen=True, slots=True)
class _Identity:
    uuid: str | None
    pci_bus_id: str | None
    name: str | None


class _GpuReader:
    """Asks NVML about one device handle; every query independent, failures turned into ``None``."""

    def __init__(self, library: NvmlLibrary, handle: Any, index: int, node: str) -> None:
        self._library = library
        self._handle = handle
        self._index = index
        self._node = node
        self.answers = 0  # values and "not supported" answers: NVML talked to us
        self.errors = 0  # unexpected error codes

    def ask(self, function: str, *args: Any) -> _Answer:
        """Call ``function(handle, *args)``; lost and uninitialised abort the GPU, the rest is an answer."""
        call = getattr(self._library, function, None)
        if call is None:
            raise _FunctionMissing(function)
        try:
            value = call(self._handle, *args)
        except NVMLError as exc:
            return self._failed(function, error_code(exc))
        self.answers += 1
        return _Answer(value=value)

    def value(self, function: str, *args: Any) -> Any:
        """The value of one query, or None when it is not available or failed."""
        try:
            return self.ask(function, *args).value
        except _FunctionMissing:
            return None

    def first_value(self, functions: Sequence[str], *args: Any) -> Any:
        """The value of the first of ``functions`` that the binding and driver have (newest first)."""
        for function in functions:
            try:
                return self.ask(function, *args).value
            except _FunctionMissing:
                continue
        return None

    def _failed(self, function: str, code: int | None) -> _Answer:
        if code == NVML_ERROR_GPU_IS_LOST:
            raise _GpuLost(function)
        if code == NVML_ERROR_UNINITIALIZED:
            raise _NvmlUninitialised(function)
        if code == NVML_ERROR_FUNCTION_NOT_FOUND:
            raise _FunctionMissing(function)
        if code in NOT_AVAILABLE_CODES:
            self.answers += 1
        else:
            self.errors += 1
            log.debug(
                "nvml_query_failed", node=self._node, gpu=self._index, call=function, code=error_name(code)
            )
        return _Answer(code=code)


def _read_identity(reader: _GpuReader) -> _Identity:
    pci = reader.value("nvmlDeviceGetPciInfo")
    return _Identity(
        uuid=_text(reader.value("nvmlDeviceGetUUID")),
        pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
        name=_text(reader.value("nvmlDeviceGetName")),
    )


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _milliwatts_to_watts(value: Any) -> float | None:
    milliwatts = _as_int(value)
    return None if milliwatts is None else milliwatts / 1000.0


def _read_temperature(reader: _GpuReader) -> int | None:
    # nvmlDeviceGetTemperature is deprecated (to be removed with CUDA 14); older bindings and drivers
    # only have it, so it is the fallback.
    return _as_int(
        reader.first_value(("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), NVML_TEMPERATURE_GPU)
    )


def _read_clocks_event_reasons(reader: _GpuReader) -> int | None:
    # Renamed from "throttle reasons" in driver 535 / nvidia-ml-py 12.535; the old name is the fallback.
    return _as_int(
        reader.first_value(
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        )
    )


def _read_ecc(reader: _GpuReader) -> EccCounters | None:
    mode = reader.value("nvmlDeviceGetEccMode")
    enabled = None if mode is None else mode[0] == NVML_FEATURE_ENABLED

    def total(error_type: int, counter_type: int) -> int | None:
        return _as_int(reader.value("nvmlDeviceGetTotalEccErrors", error_type, counter_type))

    counters = EccCounters(
        enabled=enabled,
        volatile_uncorrected=total(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC),
        aggregate_uncorrected=total(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC),
        volatile_corrected=total(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC),
        aggregate_corrected=total(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC),
    )
    return None if counters == EccCounters() else counters


def _read_remapped_rows(reader: _GpuReader) -> RemappedRows | None:
    rows = reader.value("nvmlDeviceGetRemappedRows")
    if rows is None:
        return None
    correctable, uncorrectable, pending, failure = rows
    return RemappedRows(
        correctable=int(correctable),
        uncorrectable=int(uncorrectable),
        pending=bool(pending),
        failure=bool(failure),
    )


def _read_retired_pages(reader: _GpuReader) -> RetiredPages | None:
    single = reader.value(
        "nvmlDeviceGetRetiredPages", NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    double = reader.value("nvmlDeviceGetRetiredPages", NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = reader.value("nvmlDeviceGetRetiredPagesPendingStatus")
    pages = RetiredPages(
        single_bit=None if single is None else len(single),
        double_bit=None if double is None else len(double),
        pending=None if pending is None else pending == NVML_FEATURE_ENABLED,
    )
    return None if pages == RetiredPages() else pages


def _read_pcie(reader: _GpuReader) -> PcieLink | None:
    link = PcieLink(
        gen=_as_int(reader.value("nvmlDeviceGetCurrPcieLinkGeneration")),
        width=_as_int(reader.value("nvmlDeviceGetCurrPcieLinkWidth")),
        max_gen=_as_int(reader.value("nvmlDeviceGetMaxPcieLinkGeneration")),
        max_width=_as_int(reader.value("nvmlDeviceGetMaxPcieLinkWidth")),
        replay_counter=_as_int(reader.value("nvmlDeviceGetPcieReplayCounter")),
    )
    return None if link == PcieLink() else link


_NO_SUCH_LINK: Final[frozenset[int]] = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT})


def _read_nvlink(reader: _GpuReader) -> list[NvLinkState] | None:
    """Every link the GPU has; None for a GPU without NVLink (its first link is not supported)."""
    links: list[NvLinkState] = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        try:
            state = reader.ask("nvmlDeviceGetNvLinkState", link)
        except _FunctionMissing:
            break
        if state.code in _NO_SUCH_LINK:
            break  # the GPU has no NVLink at all (link 0) or no more links
        links.append(_read_link(reader, link, state))
    # Links whose state query failed for another reason are kept (active null), but when no link
    # answered at all NVML told us nothing about NVLink on this GPU: null, like "no NVLink".
    return links if any(link.active is not None for link in links) else None


def _read_link(reader: _GpuReader, link: int, state: _Answer) -> NvLinkState:
    def counter(kind: int) -> int | None:
        return _as_int(reader.value("nvmlDeviceGetNvLinkErrorCounter", link, kind))

    flit, data = counter(NVML_NVLINK_ERROR_DL_CRC_FLIT), counter(NVML_NVLINK_ERROR_DL_CRC_DATA)
    crc = None if flit is None and data is None else (flit or 0) + (data or 0)
    return NvLinkState(
        link=link,
        active=None if not state.ok else state.value == NVML_FEATURE_ENABLED,
        replay_errors=counter(NVML_NVLINK_ERROR_DL_REPLAY),
        recovery_errors=counter(NVML_NVLINK_ERROR_DL_RECOVERY),
        crc_errors=crc,
    )


def _field_number(field: Any) -> int | float | None:
    """The number in one nvmlFieldValue_t, or None when NVML answered an error code for that field."""
    code = getattr(field, "nvmlReturn", None)
    if code == NVML_ERROR_GPU_IS_LOST:
        raise _GpuLost("nvmlDeviceGetFieldValues")
    if code != NVML_SUCCESS:
        return None
    attribute = _VALUE_ATTRIBUTE.get(getattr(field, "valueType", -1))
    number = getattr(field.value, attribute, None) if attribute else None
    return number if isinstance(number, int | float) else None


def _read_fields(reader: _GpuReader) -> tuple[int | None, int | None]:
    """(memory temperature in °C, recovery action) from one nvmlDeviceGetFieldValues call."""
    fields = reader.value(
        "nvmlDeviceGetFieldValues", [NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
    )
    if fields is None:
        return None, None
    memory_temperature, recovery_action = (_field_number(field) for field in fields)
    return (
        None if memory_temperature is None else int(memory_temperature),
        None if recovery_action is None else int(recovery_action),
    )


def _read_details(reader: _GpuReader, index: int, identity: _Identity, uuid: str) -> GpuSnapshot:
    persistence = reader.value("nvmlDeviceGetPersistenceMode")
    memory_temperature, recovery_action = _read_fields(reader)
    return GpuSnapshot(
        index=index,
        uuid=uuid,
        name=identity.name,
        pci_bus_id=identity.pci_bus_id,
        lost=False,
        persistence_mode=None if persistence is None else persistence == NVML_FEATURE_ENABLED,
        temperature_c=_read_temperature(reader),
        memory_temperature_c=memory_temperature,
        power_w=_milliwatts_to_watts(reader.value("nvmlDeviceGetPowerUsage")),
        power_limit_w=_milliwatts_to_watts(reader.value("nvmlDeviceGetEnforcedPowerLimit")),
        clocks_event_reasons=_read_clocks_event_reasons(reader),
        ecc=_read_ecc(reader),
        remapped_rows=_read_remapped_rows(reader),
        retired_pages=_read_retired_pages(reader),
        pcie=_read_pcie(reader),
        nvlink=_read_nvlink(reader),
        recovery_action=recovery_action,
    )


# --- The backend ---------------------------------------------------------------------------------------


class NvmlBackend:
    """Reads one node snapshot (format v1) through NVML.

    Use it as a context manager (or call :meth:`close`): NVML is initialised once for the backend's
    lifetime, lazily, so a missing driver shows up as ``nvml_error`` in the snapshot instead of an
    exception. If NVML answers UNINITIALIZED mid-snapshot (driver reloaded), the backend initialises again
    and reads once more.
    """

    def __init__(
        self,
        library: NvmlLibrary | None = None,
        *,
        node_name: str,
        expected_gpu_count: int | None = None,
        clock: Callable[[], datetime] = utc_now,
        xid_buffer: XidBuffer | None = None,
    ) -> None:
        if expected_gpu_count is not None and expected_gpu_count < 0:
            raise NvmlSettingError(f"expected_gpu_count must not be negative, got {expected_gpu_count}")
        self._library = library if library is not None else real_library()
        self._node = node_name
        self._expected = expected_gpu_count
        self._clock = clock
        self._xid_buffer = xid_buffer
        self._initialised = False
        self._closed = False
        self._last_failure: str | None = None  # warn when NVML becomes unavailable, not on every snapshot
        # Identity of each index as last read, so a GPU that is lost later keeps its UUID and address.
        self._identities: dict[int, _Identity] = {}

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def open(self) -> str | None:
        """Initialise NVML if not done yet; returns the failure message, or None when NVML is ready."""
        if self._closed:
            raise NvmlBackendError("this NvmlBackend is closed; create a new one")
        if self._initialised:
            return None
        try:
            self._library.nvmlInit()
        except NVMLError as exc:
            code = error_code(exc)
            return _INIT_FAILURE_MESSAGES.get(code or -1, f"nvmlInit failed: {error_name(code)}")
        except OSError as exc:
            return f"NVML library could not be loaded: {exc}"
        self._initialised = True
        log.debug("nvml_initialised", node=self._node)
        return None

    def close(self) -> None:
        """Shut NVML down (once); the backend cannot be used afterwards."""
        if self._initialised:
            try:
                self._library.nvmlShutdown()
            except NVMLError as exc:
                log.debug("nvml_shutdown_failed", node=self._node, code=error_name(error_code(exc)))
        self._initialised = False
        self._closed = True

    def snapshot(self) -> NodeSnapshot:
        """Read every GPU now; never raises for NVML trouble (see the module docstring)."""
        taken_at = self._clock()
        events = self._xid_buffer.drain_all() if self._xid_buffer is not None else []
        try:
            return self._read_node(taken_at, events)
        except _NvmlUninitialised:
            log.info("nvml_reinitialising", node=self._node)
            self._initialised = False
        try:
            return self._read_node(taken_at, events)
        except _NvmlUninitialised:
            self._initialised = False
            return self._unavailable(taken_at, "NVML stayed uninitialised after a fresh nvmlInit", events)

    def _read_node(self, taken_at: datetime, events: list[XidEvent]) -> NodeSnapshot:
        failure = self.open()
        if failure is not None:
            return self._unavailable(taken_at, failure, events)
        try:
            count = self._library.nvmlDeviceGetCount()
        except NVMLError as exc:
            code = error_code(exc)
            if code == NVML_ERROR_UNINITIALIZED:
                raise _NvmlUninitialised("nvmlDeviceGetCount") from exc
            return self._unavailable(taken_at, f"nvmlDeviceGetCount failed: {error_name(code)}", events)
        self._last_failure = None
        gpus = [self._read_gpu(index) for index in range(count)]
        gpus, unattributed = _attach_xids(gpus, events)
        return NodeSnapshot(
            node=self._node,
            taken_at=taken_at,
            driver_version=self._driver_version(),
            expected_gpu_count=self._expected,
            gpus=gpus,
            unattributed_xid_events=unattributed,
        )

    def _driver_version(self) -> str | None:
        try:
            return _text(self._library.nvmlSystemGetDriverVersion())
        except NVMLError as exc:
            if error_code(exc) == NVML_ERROR_UNINITIALIZED:
                raise _NvmlUninitialised("nvmlSystemGetDriverVersion") from exc
            log.debug("nvml_query_failed", node=self._node, call="nvmlSystemGetDriverVersion")
            return None

    def _unavailable(self, taken_at: datetime, message: str, events: list[XidEvent]) -> NodeSnapshot:
        level = log.debug if message == self._last_failure else log.warning
        level("nvml_unavailable", node=self._node, reason=message)
        self._last_failure = message
        return NodeSnapshot(
            node=self._node,
            taken_at=taken_at,
            expected_gpu_count=self._expected,
            nvml_error=message,
            gpus=[],
            unattributed_xid_events=events,
        )

    def _read_gpu(self, index: int) -> GpuSnapshot:
        try:
            handle = self._library.nvmlDeviceGetHandleByIndex(index)
        except NVMLError as exc:
            code = error_code(exc)
            if code == NVML_ERROR_UNINITIALIZED:
                raise _NvmlUninitialised("nvmlDeviceGetHandleByIndex") from exc
            log.warning("nvml_no_handle", node=self._node, gpu=index, code=error_name(code))
            return self._placeholder(index, None, lost=code == NVML_ERROR_GPU_IS_LOST)
        reader = _GpuReader(self._library, handle, index, self._node)
        try:
            identity = _read_identity(reader)
        except _GpuLost:
            return self._placeholder(index, None, lost=True)
        uuid = identity.uuid or self._uuid_of(index, lost=False)
        if identity.uuid is not None:
            self._identities[index] = identity
        try:
            gpu = _read_details(reader, index, identity, uuid)
        except _GpuLost:
            return self._placeholder(index, identity, lost=True)
        if reader.answers == 0:
            log.warning("nvml_gpu_unreadable", node=self._node, gpu=index, errors=reader.errors)
        return gpu

    def _placeholder(self, index: int, identity: _Identity | None, *, lost: bool) -> GpuSnapshot:
        """A GPU we could not read: what we know of its identity, every other field null."""
        known = self._identities.get(index)
        merged = _Identity(
            uuid=(identity.uuid if identity else None) or (known.uuid if known else None),
            pci_bus_id=(identity.pci_bus_id if identity else None) or (known.pci_bus_id if known else None),
            name=(identity.name if identity else None) or (known.name if known else None),
        )
        if lost:
            log.warning("nvml_gpu_lost", node=self._node, gpu=index, uuid=merged.uuid)
        return GpuSnapshot(
            index=index,
            uuid=merged.uuid or self._uuid_of(index, lost=lost),
            name=merged.name,
            pci_bus_id=merged.pci_bus_id,
            lost=lost,
        )

    def _uuid_of(self, index: int, *, lost: bool) -> str:
        """The UUID remembered for this index, else a stable placeholder that says why there is none."""
        known = self._identities.get(index)
        if known is not None and known.uuid is not None:
            return known.uuid
        return f"{LOST_UUID_PREFIX if lost else UNREADABLE_UUID_PREFIX}{index}"


def _attach_xids(gpus: list[GpuSnapshot], events: list[XidEvent]) -> tuple[list[GpuSnapshot], list[XidEvent]]:
    """Give each GPU its events (by UUID, else by PCI address), newest last; the rest are unattributed."""
    by_gpu: dict[int, list[XidEvent]] = {gpu.index: [] for gpu in gpus}
    unattributed: list[XidEvent] = []
    for event in events:
        owner = _owner_of(gpus, event)
        if owner is None:
            unattributed.append(event)
        else:
            by_gpu[owner.index].append(event)
    attached = [
        gpu.model_copy(update={"xid_events": by_gpu[gpu.index]}) if by_gpu[gpu.index] else gpu for gpu in gpus
    ]
    return attached, unattributed


def _owner_of(gpus: Iterable[GpuSnapshot], event: XidEvent) -> GpuSnapshot | None:
    for gpu in gpus:
        if event.gpu_uuid is not None and event.gpu_uuid == gpu.uuid:
            return gpu
    wanted = pci_key(event.pci_bus_id) if event.pci_bus_id else None
    if wanted is None:
        return None
    return next((gpu for gpu in gpus if gpu.pci_bus_id and pci_key(gpu.pci_bus_id) == wanted), None)


# --- The XID event watcher -----------------------------------------------------------------------------

XidSink = Callable[[XidEvent], None] | queue.Queue[XidEvent]


@dataclass(frozen=True, slots=True)
class _WatchedGpu:
    index: int
    uuid: str | None
    pci_bus_id: str | None


def _handle_key(handle: Any) -> Hashable:
    """A key equal for two handles of the same device: the pointer value for real ctypes handles."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle  # type: ignore[no-any-return]  # the fake's handles are hashable objects


class XidWatcher:
    """Watches NVML's XID critical-error events on its own daemon thread.

    Each watcher owns its event set and thread, so several can run in one process. ``start()`` registers
    every GPU that accepts XID events (one that answers NOT_SUPPORTED or is lost is skipped and logged);
    the thread waits ``timeout_ms`` at a time so that ``stop()`` returns promptly. A GPU lost mid-watch
    delivers nothing more and the others are still watched; other NVML errors are logged and retried with
    a growing pause. Each XID becomes ``XidEvent(source="nvml")`` given to ``sink``: a callable or a queue.
    """

    def __init__(
        self,
        library: NvmlLibrary | None = None,
        *,
        sink: XidSink,
        clock: Callable[[], datetime] = utc_now,
        timeout_ms: int = 100,
        error_backoff_s: tuple[float, float] = (0.05, 5.0),
    ) -> None:
        if not 1 <= timeout_ms <= MAX_WATCH_TIMEOUT_MS:
            raise NvmlSettingError(
                f"timeout_ms must be between 1 and {MAX_WATCH_TIMEOUT_MS}, got {timeout_ms}"
            )
        first, most = error_backoff_s
        if not 0 < first <= most:
            raise NvmlSettingError(
                f"error_backoff_s must be (first, most) with 0 < first <= most, got {error_backoff_s}"
            )
        self._library = library if library is not None else real_library()
        self._sink = sink
        self._clock = clock
        self._timeout_ms = timeout_ms
        self._backoff = error_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._watched: dict[Hashable, _WatchedGpu] = {}
        self._delivered = 0
        self._started = False
        self._initialised = False  # whether this watcher holds one NVML init reference to give back

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def watched_uuids(self) -> tuple[str | None, ...]:
        """UUIDs of the GPUs registered for XID events, in index order."""
        return tuple(gpu.uuid for gpu in sorted(self._watched.values(), key=lambda gpu: gpu.index))

    @property
    def delivered(self) -> int:
        """How many XID events this watcher has handed to its sink."""
        return self._delivered

    @property
    def running(self) -> bool:
        """Whether the watch thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Initialise NVML, register every GPU for XID events, start the thread.

        Raises NvmlUnavailableError when NVML or its event set cannot be used at all.
        """
        if self._started:
            raise NvmlBackendError("this XidWatcher was already started; create a new one")
        self._started = True
        try:
            self._library.nvmlInit()
        except NVMLError as exc:
            code = error_code(exc)
            message = _INIT_FAILURE_MESSAGES.get(code or -1, f"nvmlInit failed: {error_name(code)}")
            raise NvmlUnavailableError(message) from exc
        except OSError as exc:
            raise NvmlUnavailableError(f"NVML library could not be loaded: {exc}") from exc
        self._initialised = True
        try:
            self._event_set = self._library.nvmlEventSetCreate()
            self._register_all()
        except (NVMLError, _NvmlUninitialised) as exc:
            self._release()
            code = error_code(exc) if isinstance(exc, NVMLError) else NVML_ERROR_UNINITIALIZED
            raise NvmlUnavailableError(f"NVML event set unavailable: {error_name(code)}") from exc
        if not self._watched:
            log.warning("xid_watch_no_gpus")
        self._thread = threading.Thread(target=self._run, name=f"xid-watcher-{id(self):x}", daemon=True)
        self._thread.start()
        log.info("xid_watch_started", gpus=len(self._watched))

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop the thread and free the event set; True when the thread ended within ``timeout`` seconds."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                # Freeing the set under a thread still inside nvmlEventSetWait is unsafe in C: leave it.
                log.warning("xid_watch_stop_timeout", timeout_s=timeout)
                return False
        self._release()
        return True

    def _register_all(self) -> None:
        for index in range(self._library.nvmlDeviceGetCount()):
            try:
                handle = self._library.nvmlDeviceGetHandleByIndex(index)
                reader = _GpuReader(self._library, handle, index, node="")
                identity = _read_identity(reader)
                self._library.nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, self._event_set)
            except _GpuLost:
                log.warning("xid_watch_skipped", gpu=index, code="GPU_IS_LOST")
                continue
            except NVMLError as exc:
                log.warning("xid_watch_skipped", gpu=index, code=error_name(error_code(exc)))
                continue
            self._watched[_handle_key(handle)] = _WatchedGpu(index, identity.uuid, identity.pci_bus_id)

    def _release(self) -> None:
        if self._event_set is not None:
            try:
                self._library.nvmlEventSetFree(self._event_set)
            except NVMLError as exc:
                log.debug("xid_watch_free_failed", code=error_name(error_code(exc)))
            self._event_set = None
        if self._initialised:
            self._initialised = False
            try:
                self._library.nvmlShutdown()
            except NVMLError as exc:
                log.debug("nvml_shutdown_failed", code=error_name(error_code(exc)))

    def _run(self) -> None:
        pause = self._backoff[0]
        while not self._stop.is_set():
            try:
                data = self._library.nvmlEventSetWait(self._event_set, self._timeout_ms)
            except NVMLError as exc:
                code = error_code(exc)
                if code == NVML_ERROR_TIMEOUT:
                    continue
                if code == NVML_ERROR_GPU_IS_LOST:
                    log.warning("xid_watch_gpu_lost")
                    self._stop.wait(self._backoff[0])
                    continue
                log.warning("xid_watch_wait_failed", code=error_name(code), retry_in_s=pause)
                self._stop.wait(pause)
                pause = min(pause * 2, self._backoff[1])
                continue
            pause = self._backoff[0]
            self._deliver(data)

    def _deliver(self, data: Any) -> None:
        if not int(getattr(data, "eventType", 0)) & nvmlEventTypeXidCriticalError:
            return
        gpu = self._watched.get(_handle_key(data.device))
        event = XidEvent(
            xid=int(data.eventData),
            at=self._clock(),
            source="nvml",
            gpu_uuid=gpu.uuid if gpu else None,
            pci_bus_id=gpu.pci_bus_id if gpu else None,
        )
        log.info("xid_event", xid=event.xid, gpu=event.gpu_uuid)
        try:
            if isinstance(self._sink, queue.Queue):
                self._sink.put_nowait(event)
            else:
                self._sink(event)
        except Exception:  # a failing consumer must not end the watch (logged with traceback)
            log.exception("xid_sink_failed", xid=event.xid)
            return
        self._delivered += 1


# --- Hardware checks: python -m agent.backends.nvml --probe | --watch SECONDS | --snapshot -------------


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """How one NVML call answered on this machine (printed as: scope, call, outcome, detail).

    ``scope`` and ``call`` never contain spaces, so a script can split the printed line on white space.
    """

    scope: str  # "system" or "gpu<index>"
    call: str
    outcome: str  # OK, or the NVML error name (NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST, ...)
    detail: str = ""


_GPU_PROBES: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("nvmlDeviceGetUUID", ()),
    ("nvmlDeviceGetName", ()),
    ("nvmlDeviceGetPciInfo", ()),
    ("nvmlDeviceGetPersistenceMode", ()),
    ("nvmlDeviceGetTemperatureV", (NVML_TEMPERATURE_GPU,)),
    ("nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,)),
    ("nvmlDeviceGetPowerUsage", ()),
    ("nvmlDeviceGetEnforcedPowerLimit", ()),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
    ("nvmlDeviceGetEccMode", ()),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)),
    ("nvmlDeviceGetRemappedRows", ()),
    ("nvmlDeviceGetRetiredPages", (NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,)),
    ("nvmlDeviceGetRetiredPages", (NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,)),
    ("nvmlDeviceGetRetiredPagesPendingStatus", ()),
    ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
    ("nvmlDeviceGetCurrPcieLinkWidth", ()),
    ("nvmlDeviceGetMaxPcieLinkGeneration", ()),
    ("nvmlDeviceGetMaxPcieLinkWidth", ()),
    ("nvmlDeviceGetPcieReplayCounter", ()),
    ("nvmlDeviceGetNvLinkState", (0,)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_REPLAY)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_RECOVERY)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_CRC_FLIT)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_CRC_DATA)),
)

_PROBE_FIELDS: Final[tuple[tuple[str, int], ...]] = (
    ("NVML_FI_DEV_MEMORY_TEMP", NVML_FI_DEV_MEMORY_TEMP),
    ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
)


def _describe(value: Any) -> str:
    """A short text for a probe answer: the bus id of a PCI info, short lists whole, long ones counted."""
    if hasattr(value, "busId"):
        return f"busId={_text(value.busId)}"
    if isinstance(value, list | tuple):
        return repr(list(value)) if len(value) <= 4 else f"{len(value)} entries"
    if value is None or isinstance(value, int | float | str | bytes):
        return repr(_text(value) or value)[:80]
    return type(value).__name__


def _probe_call(library: Any, scope: str, function: str, *args: Any) -> tuple[ProbeResult, Any]:
    call = getattr(library, function, None)
    label = f"{function}({','.join(map(str, args[1:]))})" if args[1:] else function
    if call is None:
        return ProbeResult(scope, label, "NOT_IN_BINDINGS"), None
    try:
        value = call(*args)
    except NVMLError as exc:
        return ProbeResult(scope, label, error_name(error_code(exc))), None
    return ProbeResult(scope, label, "OK", _describe(value)), value


def probe(library: NvmlLibrary | None = None) -> list[ProbeResult]:
    """Ask every NVML call gpuhealth uses, on every GPU, and say how each answered."""
    lib: Any = library if library is not None else real_library()
    init, _ = _probe_call(lib, "system", "nvmlInit")
    results = [init]
    if init.outcome != "OK":
        return results
    try:
        results.append(_probe_call(lib, "system", "nvmlSystemGetDriverVersion")[0])
        count_result, count = _probe_call(lib, "system", "nvmlDeviceGetCount")
        results.append(count_result)
        for index in range(count or 0):
            results.extend(_probe_gpu(lib, index))
    finally:
        lib.nvmlShutdown()
    return results


def _probe_gpu(lib: Any, index: int) -> list[ProbeResult]:
    scope = f"gpu{index}"
    handle_result, handle = _probe_call(lib, scope, "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return [handle_result]
    results = [_probe_call(lib, scope, name, handle, *args)[0] for name, args in _GPU_PROBES]
    results.extend(_probe_fields(lib, scope, handle))
    results.append(_probe_nvlink_count(lib, scope, handle, index))
    results.extend(_probe_events(lib, scope, handle))
    return results


def _probe_nvlink_count(lib: Any, scope: str, handle: Any, index: int) -> ProbeResult:
    label = "nvlink_links_read_by_backend"
    try:
        links = _read_nvlink(_GpuReader(lib, handle, index, node="probe"))
    except _GpuLost:
        return ProbeResult(scope, label, "GPU_IS_LOST")
    except _NvmlUninitialised:
        return ProbeResult(scope, label, "UNINITIALIZED")
    return ProbeResult(scope, label, "OK", "none: no NVLink" if links is None else f"{len(links)} links")


def _probe_fields(lib: Any, scope: str, handle: Any) -> list[ProbeResult]:
    results = []
    for name, field_id in _PROBE_FIELDS:
        outcome, fields = _probe_call(lib, scope, "nvmlDeviceGetFieldValues", handle, [field_id])
        label = f"nvmlDeviceGetFieldValues({name})"
        if fields is None:
            results.append(ProbeResult(scope, label, outcome.outcome))
            continue
        code = fields[0].nvmlReturn
        detail = "" if code != NVML_SUCCESS else f"value={_field_number(fields[0])}"
        results.append(ProbeResult(scope, label, "OK" if code == NVML_SUCCESS else error_name(code), detail))
    return results


def _probe_events(lib: Any, scope: str, handle: Any) -> list[ProbeResult]:
    created, event_set = _probe_call(lib, scope, "nvmlEventSetCreate")
    if event_set is None:
        return [created]
    registered, _ = _probe_call(
        lib, scope, "nvmlDeviceRegisterEvents", handle, nvmlEventTypeXidCriticalError, event_set
    )
    lib.nvmlEventSetFree(event_set)
    return [created, ProbeResult(scope, "nvmlDeviceRegisterEvents(XidCriticalError)", registered.outcome)]


def watch(
    seconds: float, out: IO[str], library: NvmlLibrary | None = None, *, timeout_ms: int = 100
) -> dict[str, Any]:
    """Run an XidWatcher for ``seconds``, print each event as a JSON line, and return a summary."""
    events: queue.Queue[XidEvent] = queue.Queue()
    watcher = XidWatcher(library, sink=events, timeout_ms=timeout_ms)
    watcher.start()
    deadline = time.monotonic() + seconds
    count = 0
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                event = events.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                continue
            count += 1
            out.write(event.model_dump_json() + "\n")
    finally:
        began = time.monotonic()
        stopped = watcher.stop()
        stop_s = time.monotonic() - began
    return {
        "watched_s": seconds,
        "registered_gpus": len(watcher.watched_uuids),
        "events": count,
        "stopped_cleanly": stopped,
        "stop_s": round(stop_s, 3),
    }


def main(
    argv: Sequence[str] | None = None, *, library: NvmlLibrary | None = None, out: IO[str] | None = None
) -> int:
    """``python -m agent.backends.nvml``: probe the NVML calls, watch XIDs, or print one snapshot."""
    parser = argparse.ArgumentParser(prog="python -m agent.backends.nvml", description=main.__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--probe", action="store_true", help="one line per NVML call: OK / NOT_SUPPORTED / error"
    )
    mode.add_argument(
        "--watch", type=float, metavar="SECONDS", help="watch XID events for SECONDS, then stop"
    )
    mode.add_argument("--snapshot", action="store_true", help="print one v1 snapshot of this node")
    parser.add_argument("--node", default="localhost", help="node name for --snapshot")
    parser.add_argument("--log-level", default="warning", help="debug, info, warning or error (to stderr)")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    stream = out if out is not None else sys.stdout
    if args.probe:
        results = probe(library)
        for result in results:
            stream.write(f"{result.scope:<7} {result.call:<72} {result.outcome:<18} {result.detail}\n")
        return 0 if results[0].outcome == "OK" else 3
    if args.watch is not None:
        if args.watch < 0:
            parser.error("--watch SECONDS must not be negative")
        try:
            summary = watch(args.watch, stream, library)
        except NvmlUnavailableError as exc:
            sys.stderr.write(f"xid watch: {exc}\n")
            return 3
        stream.write(json.dumps(summary) + "\n")
        return 0 if summary["stopped_cleanly"] else 1
    with NvmlBackend(library, node_name=args.node) as backend:
        snapshot = backend.snapshot()
    stream.write(snapshot.to_json() + "\n")
    return 3 if snapshot.nvml_error else 0


if __name__ == "__main__":
    raise SystemExit(main())
