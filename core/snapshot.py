"""Snapshot format v1: one reading of one node's GPUs (see docs/snapshot.md; JSON Schema in docs/schemas/).

Every GPU field except ``index`` and ``uuid`` may be ``null``: NVML reported it as not supported on this
GPU or driver, or it could not be read. Checks treat ``null`` as "no signal", never as a fault.

The models are frozen and strict: a wrongly typed value (``"41"`` for a temperature) makes a snapshot
invalid instead of being silently coerced, and unknown extra fields are ignored so that newer agents can
add optional fields without breaking older readers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.config import JsonDict

from core.dcgm import DcgmReadings

SNAPSHOT_SCHEMA: Final = "gpuhealth.snapshot/v1"

XidSource = Literal["nvml", "kernel_log", "dcgm"]


def _none_as_empty_list(value: object) -> object:
    """An absent or ``null`` event list means "no events"; store it as an empty list."""
    return [] if value is None else value


def _utc_datetime(value: object) -> object:
    """Accept an ISO 8601 string or a datetime; a time without a zone is taken as UTC.

    Done here rather than by pydantic's strict mode because strict mode accepts strings for datetimes only
    when validating JSON text directly, and nested lists are validated from Python objects.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"not an ISO 8601 date-time: {value!r}") from exc
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


UtcDatetime = Annotated[datetime, BeforeValidator(_utc_datetime)]
"""A timezone-aware datetime, serialised as ISO 8601."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")


class XidEvent(_Model):
    """One XID error, as NVML's event set, the kernel log or DCGM reported it."""

    xid: int = Field(description="The XID number; NVML reports 999 for an XID it cannot classify.")
    at: UtcDatetime | None = Field(default=None, description="When it happened (UTC), if known.")
    source: XidSource = Field(description="Who reported it: nvml, kernel_log or dcgm.")
    message: str | None = Field(default=None, description="The driver's text after the XID number, if any.")
    gpu_uuid: str | None = Field(default=None, description="The GPU it happened on, when the source knows.")
    pci_bus_id: str | None = Field(default=None, description="PCI address as the source spelled it.")
    pid: int | None = Field(default=None, description="Process id named by the kernel log line, if any.")
    process_name: str | None = Field(default=None, description="Process name named by the kernel log line.")


class EccCounters(_Model):
    """ECC state and error counters (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors)."""

    enabled: bool | None = None
    volatile_uncorrected: int | None = None
    aggregate_uncorrected: int | None = None
    volatile_corrected: int | None = None
    aggregate_corrected: int | None = None


class RemappedRows(_Model):
    """Row remapping (nvmlDeviceGetRemappedRows; Ampere and newer, not with MIG enabled)."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


class RetiredPages(_Model):
    """Dynamic page retirement (nvmlDeviceGetRetiredPages*; before Ampere)."""

    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool | None = None


class PcieLink(_Model):
    """PCIe link now and at most (nvmlDeviceGetCurr/MaxPcieLinkGeneration/Width) and replays."""

    gen: int | None = None
    width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None
    replay_counter: int | None = None


class NvLinkState(_Model):
    """One NVLink link (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter)."""

    link: int
    active: bool | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_errors: int | None = None


class GpuFabric(_Model):
    """The GPU's NVLink fabric registration (nvmlDeviceGetGpuFabricInfo): NVSwitch systems only.

    ``state`` is NVML's fabric state (1 not started, 2 in progress, 3 completed; 0 "not supported" is stored
    as a null ``fabric``, and a saved 0 means the same: no signal); ``status`` is the NVML return code of the
    registration once completed (0 success); ``health_summary`` the fabric's health where the driver
    reports it.
    """

    state: int | None = Field(
        default=None, description="NVML_GPU_FABRIC_STATE_*: 1 not started, 2 in progress, 3 completed."
    )
    status: int | None = Field(
        default=None, description="NVML return code of the fabric registration (0 = success)."
    )
    clique_id: int | None = Field(default=None, description="The NVLink clique (partition) the GPU is in.")
    cluster_uuid: str | None = Field(default=None, description="The NVLink domain (cluster) UUID, if set.")
    health_summary: int | None = Field(
        default=None,
        description=(
            "NVML_GPU_FABRIC_HEALTH_SUMMARY_*: 1 healthy, 2 unhealthy, 3 limited capacity (degraded); null "
            "when the driver reports none (extension; nvmlDeviceGetGpuFabricInfoV, GB200-class systems)."
        ),
    )


class GpuSnapshot(_Model):
    """One GPU in a snapshot. Only ``index`` and ``uuid`` are required."""

    index: int
    uuid: str
    name: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = Field(
        default=None, description="The board's serial number (NVML), what a replacement request names."
    )
    lost: bool | None = None
    persistence_mode: bool | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clocks_event_reasons: int | None = None
    sm_clock_mhz: int | None = Field(
        default=None,
        description="Extension to v1: current SM clock in MHz (nvmlDeviceGetClockInfo, NVML_CLOCK_SM).",
    )
    max_sm_clock_mhz: int | None = Field(
        default=None, description="Extension to v1: highest SM clock in MHz (nvmlDeviceGetMaxClockInfo)."
    )
    vbios_version: str | None = Field(
        default=None, description="Extension to v1: the VBIOS version (nvmlDeviceGetVbiosVersion)."
    )
    utilization_pct: int | None = Field(
        default=None,
        description=(
            "Extension to v1: percent of the last sample period a kernel ran "
            "(nvmlDeviceGetUtilizationRates().gpu)."
        ),
    )
    ecc: EccCounters | None = None
    remapped_rows: RemappedRows | None = None
    retired_pages: RetiredPages | None = None
    pcie: PcieLink | None = None
    nvlink: list[NvLinkState] | None = Field(
        default=None,
        description="One entry per link the GPU has; null when the GPU has no NVLink (PCIe boards).",
    )
    recovery_action: int | None = Field(
        default=None,
        description=(
            "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, "
            "4 drain and reset"
        ),
    )
    xid_events: Annotated[list[XidEvent], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list, description="XIDs seen since the previous snapshot, newest last."
    )
    fabric: GpuFabric | None = Field(
        default=None,
        description="NVLink fabric state (NVSwitch systems); null when NVML does not support it here.",
    )


class IbPort(_Model):
    """One InfiniBand / RoCE port, read from /sys/class/infiniband/<device>/ports/<port>/.

    ``state`` and ``phys_state`` keep the kernel's text (``4: ACTIVE``, ``5: LinkUp``); ``counters`` holds
    the standard port counters that exist (``link_downed``, ``symbol_error``, ...), ``hw_counters`` the
    driver's own (``hw_counters/`` directory), each null when the directory is absent. Counters are
    lifetime totals since the driver loaded: checks judge their rates between readings.
    """

    device: str = Field(description="The RDMA device, e.g. mlx5_0.")
    port: int = Field(description="The port number (1-based).")
    state: str | None = Field(default=None, description="Logical state as sysfs prints it, e.g. '4: ACTIVE'.")
    phys_state: str | None = Field(
        default=None, description="Physical state as sysfs prints it, e.g. '5: LinkUp'."
    )
    rate: str | None = Field(
        default=None, description="Link rate as sysfs prints it, e.g. '400 Gb/sec (4X NDR)'."
    )
    link_layer: str | None = Field(default=None, description="InfiniBand or Ethernet (RoCE).")
    netdev: str | None = Field(default=None, description="The network interface of the port, when known.")
    counters: dict[str, int] | None = Field(default=None, description="Standard port counters present.")
    hw_counters: dict[str, int] | None = Field(default=None, description="Driver hw_counters present.")


class LinkEvent(_Model):
    """A NIC port's link going down or up, from a kernel-log line: mlx5's netdev ``Link down`` / ``Link up``,
    or ib_core's ``<ibdev>: Port: N Link DOWN`` / ``ACTIVE`` (an InfiniBand port, which has no netdev)."""

    up: bool = Field(description="True for Link up (ACTIVE), False for Link down (DOWN).")
    at: UtcDatetime | None = Field(default=None, description="When it happened (UTC), if the line says.")
    pci_bus_id: str | None = Field(default=None, description="The NIC function's PCI address as printed.")
    netdev: str | None = Field(default=None, description="The interface named by the line, if any.")
    ib_device: str | None = Field(
        default=None, description="The RDMA device an ib_core port-state line names, e.g. mlx5_0 (extension)."
    )
    port: int | None = Field(
        default=None, description="The port number of an ib_core port-state line (extension)."
    )
    message: str | None = Field(default=None, description="The line's text after the driver prefix.")


SxidSeverity = Literal["fatal", "non-fatal"]


class SxidEvent(_Model):
    """One NVSwitch error (an SXid) from the nvidia-nvswitch driver's kernel-log line."""

    sxid: int = Field(description="The SXid number, e.g. 12028.")
    switch: int | None = Field(default=None, description="N of the nvidia-nvswitchN device, when printed.")
    pci_bus_id: str | None = Field(default=None, description="The switch's PCI address as printed.")
    severity: SxidSeverity | None = Field(
        default=None, description="fatal or non-fatal, as the line says; null when it does not."
    )
    message: str | None = Field(default=None, description="The text after the SXid number.")
    at: UtcDatetime | None = Field(default=None, description="When it happened (UTC), if the line says.")
    detail_severity: int | None = Field(
        default=None,
        description=(
            "N of a follow-up line's 'Severity N' (the driver's NVSWITCH_ERROR_SEVERITY_*: 0 non-fatal, "
            "1 fatal); null on a header line (extension)."
        ),
    )


class FabricReadings(_Model):
    """The node's fabric beyond the GPUs: InfiniBand / RoCE ports, NIC link events and NVSwitch SXids.

    ``ib_ports`` is null when the node has no /sys/class/infiniband tree (no RDMA devices, or not readable):
    no signal, never a fault. The event lists hold what was seen since the previous snapshot.
    """

    ib_ports: list[IbPort] | None = Field(default=None, description="Every IB / RoCE port; null: no tree.")
    link_events: Annotated[list[LinkEvent], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list, description="NIC link down / up lines since the previous snapshot."
    )
    sxid_events: Annotated[list[SxidEvent], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list, description="NVSwitch SXids since the previous snapshot, newest last."
    )


def _require_schema_key(schema: JsonDict) -> None:
    """The published JSON Schema lists ``schema`` as required, as the wire format does."""
    required = schema.setdefault("required", [])
    if isinstance(required, list) and "schema" not in required:
        required.insert(0, "schema")


class NodeSnapshot(_Model):
    """One reading of one node: format ``gpuhealth.snapshot/v1``."""

    schema_: Literal["gpuhealth.snapshot/v1"] = Field(alias="schema", default=SNAPSHOT_SCHEMA)
    node: str
    taken_at: UtcDatetime | None = None
    driver_version: str | None = None
    expected_gpu_count: int | None = None
    nvml_error: str | None = Field(
        default=None,
        description="Set when NVML could not be initialised or did not answer (watchdog); gpus is empty.",
    )
    gpus: list[GpuSnapshot]
    unattributed_xid_events: Annotated[list[XidEvent], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list,
        description=(
            "XIDs that could not be tied to a listed GPU, e.g. a kernel-log line naming a PCI address that "
            "NVML no longer enumerates because the GPU fell off the bus (extension to v1; optional)."
        ),
    )
    fabric: FabricReadings | None = Field(
        default=None,
        description="InfiniBand / RoCE ports, NIC link events and NVSwitch SXids (v1 extension; optional).",
    )
    dcgm: DcgmReadings | None = Field(
        default=None,
        description=(
            "What dcgm-exporter and `dcgmi health` said at this reading, before judgement (v1 extension; "
            "optional): null when no DCGM source is configured."
        ),
    )

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="ignore",
        populate_by_name=True,
        # On the wire ``schema`` is required (agent.backends.replay enforces it); in Python it defaults to v1.
        json_schema_extra=_require_schema_key,
    )

    def to_json(self, *, indent: int | None = 2) -> str:
        """Serialise in the v1 wire form (``schema`` key, every field present, nulls included)."""
        return self.model_dump_json(by_alias=True, indent=indent)

    def owner_of(self, event: XidEvent) -> int | None:
        """The position of the listed GPU an XID belongs to (:func:`xid_owner`), or None."""
        return xid_owner(self.gpus, event)


def xid_owner(gpus: Sequence[GpuSnapshot], event: XidEvent) -> int | None:
    """The position in ``gpus`` of the GPU an XID belongs to, decided once for every path (NVML's events,
    kernel-log lines, DCGM's, and the checks' unattributed events).

    The GPU its UUID names, else the GPU at its PCI address (any spelling, :func:`pci_key`); None when
    neither names a listed GPU. The UUID wins because it names one chip for its life, while a PCI address
    names a slot, and the event's source read the UUID from the chip itself (NVML, DCGM).
    """
    if event.gpu_uuid is not None:
        for position, gpu in enumerate(gpus):
            if gpu.uuid == event.gpu_uuid:
                return position
    wanted = pci_key(event.pci_bus_id) if event.pci_bus_id else None
    if wanted is None:
        return None
    return next(
        (
            position
            for position, gpu in enumerate(gpus)
            if gpu.pci_bus_id and pci_key(gpu.pci_bus_id) == wanted
        ),
        None,
    )


_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


def pci_key(bus_id: str) -> str | None:
    """A canonical ``dddd:bb:dd`` key for a PCI address, or None if it is not one.

    NVML spells addresses ``00000000:3B:00.0`` (8-digit domain, upper case, function); the kernel log's
    NVRM lines say ``0000:3b:00`` (4-digit domain, lower case, no function); some tools drop the domain.
    XIDs are per GPU, so the function number is not part of the key.
    """
    match = _PCI_RE.match(bus_id.strip())
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    return f"{domain:04x}:{int(match.group('bus'), 16):02x}:{int(match.group('device'), 16):02x}"
