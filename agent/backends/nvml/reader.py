"""Reading one GPU through NVML: every query independent, each failure turned into ``None``.

:class:`GpuReader` asks NVML about one device handle and counts how it answered; :func:`read_identity`
and :func:`read_details` turn the answers into a
:class:`~core.snapshot.GpuSnapshot`. Two answers stop the reading of a GPU instead of becoming
``None``: GPU_IS_LOST (:class:`GpuLost`) and UNINITIALIZED (:class:`NvmlUninitialised`, the driver was
reloaded); :class:`agent.backends.nvml.backend.NvmlBackend`
handles both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from agent.backends.nvml.seam import (
    NOT_AVAILABLE_CODES,
    NVML_AGGREGATE_ECC,
    NVML_CLOCK_SM,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_FEATURE_ENABLED,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVML_FI_DEV_MEMORY_TEMP,
    NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED,
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_ERROR_DL_CRC_DATA,
    NVML_NVLINK_ERROR_DL_CRC_FLIT,
    NVML_NVLINK_ERROR_DL_RECOVERY,
    NVML_NVLINK_ERROR_DL_REPLAY,
    NVML_NVLINK_MAX_LINKS,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_TYPE_DOUBLE,
    NVML_VALUE_TYPE_SIGNED_INT,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVML_VALUE_TYPE_UNSIGNED_LONG,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    NVML_VALUE_TYPE_UNSIGNED_SHORT,
    NVML_VOLATILE_ECC,
    NVMLError,
    NvmlLibrary,
    error_code,
    error_name,
    gpu_fabric_info_request,
    gpu_fabric_info_v3_request,
    nvml_text,
)
from core.snapshot import (
    EccCounters,
    GpuFabric,
    GpuSnapshot,
    NvLinkState,
    PcieLink,
    RemappedRows,
    RetiredPages,
)

log = structlog.get_logger(__name__)

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


class GpuLost(Exception):
    """NVML said GPU_IS_LOST: stop reading this GPU."""


class NvmlUninitialised(Exception):
    """NVML said UNINITIALIZED mid-snapshot (driver reloaded): initialise again and start over."""


class _FunctionMissing(Exception):
    """The binding or the driver lacks this function; a caller may fall back to an older one."""


@dataclass(slots=True)  # not frozen: built for every NVML call (about 800 a node read), frozen costs more
class _Answer:
    value: Any = None
    code: int | None = None  # None when NVML answered with a value

    @property
    def ok(self) -> bool:
        return self.code is None


@dataclass(frozen=True, slots=True)
class Identity:
    """What names a GPU: read first, and remembered so that a GPU lost later keeps it."""

    uuid: str | None
    pci_bus_id: str | None
    name: str | None
    serial: str | None = None


class GpuReader:
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
            raise GpuLost(function)
        if code == NVML_ERROR_UNINITIALIZED:
            raise NvmlUninitialised(function)
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


def read_identity(reader: GpuReader) -> Identity:
    """UUID, PCI bus id, name and board serial of the GPU; each None when NVML would not say."""
    pci = reader.value("nvmlDeviceGetPciInfo")
    return Identity(
        uuid=nvml_text(reader.value("nvmlDeviceGetUUID")),
        pci_bus_id=nvml_text(getattr(pci, "busId", None)) if pci is not None else None,
        name=nvml_text(reader.value("nvmlDeviceGetName")),
        serial=nvml_text(reader.value("nvmlDeviceGetSerial")),
    )


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _milliwatts_to_watts(value: Any) -> float | None:
    milliwatts = _as_int(value)
    return None if milliwatts is None else milliwatts / 1000.0


def _read_temperature(reader: GpuReader) -> int | None:
    # nvmlDeviceGetTemperature is deprecated (to be removed with CUDA 14); older bindings and drivers
    # only have it, so it is the fallback.
    return _as_int(
        reader.first_value(("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), NVML_TEMPERATURE_GPU)
    )


def _read_clocks_event_reasons(reader: GpuReader) -> int | None:
    # Renamed from "throttle reasons" in driver 535 / nvidia-ml-py 12.535; the old name is the fallback.
    return _as_int(
        reader.first_value(
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        )
    )


def _read_utilization(reader: GpuReader) -> int | None:
    rates = reader.value("nvmlDeviceGetUtilizationRates")
    return None if rates is None else _as_int(getattr(rates, "gpu", None))


def _read_ecc(reader: GpuReader) -> EccCounters | None:
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


def _read_remapped_rows(reader: GpuReader) -> RemappedRows | None:
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


def _read_retired_pages(reader: GpuReader) -> RetiredPages | None:
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


def _read_pcie(reader: GpuReader) -> PcieLink | None:
    link = PcieLink(
        gen=_as_int(reader.value("nvmlDeviceGetCurrPcieLinkGeneration")),
        width=_as_int(reader.value("nvmlDeviceGetCurrPcieLinkWidth")),
        max_gen=_as_int(reader.value("nvmlDeviceGetMaxPcieLinkGeneration")),
        max_width=_as_int(reader.value("nvmlDeviceGetMaxPcieLinkWidth")),
        replay_counter=_as_int(reader.value("nvmlDeviceGetPcieReplayCounter")),
    )
    return None if link == PcieLink() else link


_NO_SUCH_LINK: Final[frozenset[int]] = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT})


def read_nvlink(reader: GpuReader) -> list[NvLinkState] | None:
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


def _read_link(reader: GpuReader, link: int, state: _Answer) -> NvLinkState:
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


def field_number(field: Any) -> int | float | None:
    """The number in one nvmlFieldValue_t, or None when NVML answered an error code for that field."""
    code = getattr(field, "nvmlReturn", None)
    if code == NVML_ERROR_GPU_IS_LOST:
        raise GpuLost("nvmlDeviceGetFieldValues")
    if code != NVML_SUCCESS:
        return None
    attribute = _VALUE_ATTRIBUTE.get(getattr(field, "valueType", -1))
    number = getattr(field.value, attribute, None) if attribute else None
    return number if isinstance(number, int | float) else None


def _read_fields(reader: GpuReader) -> tuple[int | None, int | None]:
    """(memory temperature in °C, recovery action) from one nvmlDeviceGetFieldValues call."""
    fields = reader.value(
        "nvmlDeviceGetFieldValues", [NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
    )
    if fields is None:
        return None, None
    memory_temperature, recovery_action = (field_number(field) for field in fields)
    return (
        None if memory_temperature is None else int(memory_temperature),
        None if recovery_action is None else int(recovery_action),
    )


def read_fabric(reader: GpuReader) -> GpuFabric | None:
    """The GPU's NVLink fabric registration (and its health summary where the driver reports one, through
    ``nvmlDeviceGetGpuFabricInfoV``); None where NVML does not support it (no NVSwitch fabric)."""
    info, reference = gpu_fabric_info_v3_request()
    health: int | None = None
    if reference is not None and reader.value("nvmlDeviceGetGpuFabricInfoV", reference) is not None:
        summary = _as_int(info.healthSummary)
        health = None if summary in (None, NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED) else summary
    else:
        info, reference = gpu_fabric_info_request()
        if reader.value("nvmlDeviceGetGpuFabricInfo", reference) is None:
            return None
    state = _as_int(info.state)
    if state is None or state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return None
    uuid_bytes = bytes(info.clusterUuid)
    return GpuFabric(
        state=state,
        status=_as_int(info.status),
        clique_id=_as_int(info.cliqueId),
        cluster_uuid=None if not any(uuid_bytes) else _uuid_text(uuid_bytes),
        health_summary=health,
    )


def _uuid_text(raw: bytes) -> str:
    digits = raw.hex()
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def read_details(reader: GpuReader, index: int, identity: Identity, uuid: str) -> GpuSnapshot:
    """Every field of one GPU's snapshot; raises GpuLost or NvmlUninitialised to stop reading it."""
    persistence = reader.value("nvmlDeviceGetPersistenceMode")
    memory_temperature, recovery_action = _read_fields(reader)
    return GpuSnapshot(
        index=index,
        uuid=uuid,
        name=identity.name,
        pci_bus_id=identity.pci_bus_id,
        serial=identity.serial,
        lost=False,
        persistence_mode=None if persistence is None else persistence == NVML_FEATURE_ENABLED,
        temperature_c=_read_temperature(reader),
        memory_temperature_c=memory_temperature,
        power_w=_milliwatts_to_watts(reader.value("nvmlDeviceGetPowerUsage")),
        power_limit_w=_milliwatts_to_watts(reader.value("nvmlDeviceGetEnforcedPowerLimit")),
        clocks_event_reasons=_read_clocks_event_reasons(reader),
        sm_clock_mhz=_as_int(reader.value("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)),
        max_sm_clock_mhz=_as_int(reader.value("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM)),
        utilization_pct=_read_utilization(reader),
        vbios_version=nvml_text(reader.value("nvmlDeviceGetVbiosVersion")),
        ecc=_read_ecc(reader),
        remapped_rows=_read_remapped_rows(reader),
        retired_pages=_read_retired_pages(reader),
        pcie=_read_pcie(reader),
        nvlink=read_nvlink(reader),
        recovery_action=recovery_action,
        fabric=read_fabric(reader),
    )
