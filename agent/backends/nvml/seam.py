# ruff: noqa: N802, N803  -- the NvmlLibrary protocol mirrors pynvml's own camelCase names exactly
"""The seam to NVML: the ONLY module in gpuhealth that imports ``pynvml`` (nvidia-ml-py).

It holds what every NVML user shares: the :class:`NvmlLibrary` protocol (the pynvml surface gpuhealth
uses), the ``NVML_*`` constants re-exported, NVML's error classes (:data:`NVMLError`, :func:`nvml_error`)
and the helpers that read them (:func:`error_code`, :func:`error_name`), :func:`initialise`, and the
errors the backend modules raise themselves. The users of the seam are:

* :mod:`agent.backends.nvml.backend` — :class:`NvmlBackend` reads one node snapshot (format v1), GPU by
  GPU through :mod:`agent.backends.nvml.reader`;
* :mod:`agent.backends.nvml.xid_watcher` — :class:`XidWatcher` and :class:`XidBuffer` for XID events;
* :mod:`agent.backends.nvml.tool` — ``python -m agent.backends.nvml.seam --probe | --watch SECONDS |
  --snapshot`` for checks on real hardware (this module's ``__main__`` hands over to it).

Every function receives the NVML "library" as an object (default: the real ``pynvml`` module, see
:func:`real_library`), so tests pass :class:`sim.fakes.nvml.FakeNvml` instead. The fake gets
NVML's real error classes and constants from here and never imports ``pynvml`` itself.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final, Protocol

import pynvml

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
NVML_ERROR_IN_USE: Final[int] = pynvml.NVML_ERROR_IN_USE
NVML_ERROR_LIB_RM_VERSION_MISMATCH: Final[int] = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
NVML_ERROR_UNKNOWN: Final[int] = pynvml.NVML_ERROR_UNKNOWN

NVML_FEATURE_DISABLED: Final[int] = pynvml.NVML_FEATURE_DISABLED
NVML_FEATURE_ENABLED: Final[int] = pynvml.NVML_FEATURE_ENABLED
NVML_TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
NVML_CLOCK_GRAPHICS: Final[int] = pynvml.NVML_CLOCK_GRAPHICS
NVML_CLOCK_SM: Final[int] = pynvml.NVML_CLOCK_SM
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
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: Final[int] = getattr(pynvml, "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED", 0)
NVML_GPU_FABRIC_STATE_NOT_STARTED: Final[int] = getattr(pynvml, "NVML_GPU_FABRIC_STATE_NOT_STARTED", 1)
NVML_GPU_FABRIC_STATE_IN_PROGRESS: Final[int] = getattr(pynvml, "NVML_GPU_FABRIC_STATE_IN_PROGRESS", 2)
NVML_GPU_FABRIC_STATE_COMPLETED: Final[int] = getattr(pynvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED: Final[int] = getattr(
    pynvml, "NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED", 0
)
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
    """Base of the errors the NVML backend modules (backend, watcher) raise themselves."""


class NvmlUnavailableError(NvmlBackendError):
    """NVML could not be initialised or used at all (driver missing, not loaded, no permission)."""


class NvmlSettingError(NvmlBackendError, ValueError):
    """A setting given to the backend or the watcher is out of range."""


def initialise(library: NvmlLibrary) -> None:
    """Call ``nvmlInit`` once; raises NvmlUnavailableError naming the likely cause when NVML cannot start."""
    try:
        library.nvmlInit()
    except NVMLError as exc:
        code = error_code(exc)
        message = _INIT_FAILURE_MESSAGES.get(code or -1, f"nvmlInit failed: {error_name(code)}")
        raise NvmlUnavailableError(message) from exc
    except OSError as exc:
        raise NvmlUnavailableError(f"NVML library could not be loaded: {exc}") from exc


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
    def nvmlDeviceGetSerial(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = ...) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...  # noqa: A002 -- pynvml's name
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int: ...  # noqa: A002
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> Any: ...
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
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]: ...
    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int: ...
    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any: ...
    def nvmlEventSetFree(self, eventSet: Any) -> None: ...


def gpu_fabric_info_request() -> tuple[Any, Any]:
    """An empty ``nvmlGpuFabricInfo_t`` and the reference to pass to ``nvmlDeviceGetGpuFabricInfo``.

    NVML fills the structure in place (``clusterUuid``, ``status``, ``cliqueId``, ``state``); the fake NVML
    fills the same structure through the same reference (its ``_obj``).
    """
    info = pynvml.c_nvmlGpuFabricInfo_t()
    return info, ctypes.byref(info)


def gpu_fabric_info_v3_request() -> tuple[Any, Any]:
    """An empty ``nvmlGpuFabricInfo_v3_t`` (version set) and the reference to pass to
    ``nvmlDeviceGetGpuFabricInfoV``: the v1 fields plus ``healthMask`` and ``healthSummary`` (drivers that
    report the NVLink fabric's health, GB200-class systems). None, None when the binding predates it."""
    structure = getattr(pynvml, "c_nvmlGpuFabricInfo_v3_t", None)
    version = getattr(pynvml, "nvmlGpuFabricInfo_v3", None)
    if structure is None or version is None:
        return None, None
    info = structure()
    info.version = version
    return info, ctypes.byref(info)


def real_library() -> NvmlLibrary:
    """The real ``pynvml`` module, typed as the surface we use."""
    library: NvmlLibrary = pynvml
    return library


def nvml_text(value: object) -> str | None:
    """NVML strings: ``str`` from current nvidia-ml-py, ``bytes`` from older releases."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


if __name__ == "__main__":
    # ``python -m agent.backends.nvml.seam`` runs the hardware tool. Run by name, not imported: the tool uses
    # this seam, so an import here would make the seam depend on its own user.
    import runpy

    runpy.run_module("agent.backends.nvml.tool", run_name="__main__", alter_sys=True)
