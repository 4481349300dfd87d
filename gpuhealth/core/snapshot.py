"""Snapshot format v1: one reading of one node's GPUs (see docs/snapshot.md; JSON Schema in docs/schemas/).

Every GPU field except ``index`` and ``uuid`` may be ``null``: NVML reported it as not supported on this
GPU or driver, or it could not be read. Checks treat ``null`` as "no signal", never as a fault.

The models are frozen and strict: a wrongly typed value (``"41"`` for a temperature) makes a snapshot
invalid instead of being silently coerced, and unknown extra fields are ignored so that newer agents can
add optional fields without breaking older readers.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.config import JsonDict

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


class GpuSnapshot(_Model):
    """One GPU in a snapshot. Only ``index`` and ``uuid`` are required."""

    index: int
    uuid: str
    name: str | None = None
    pci_bus_id: str | None = None
    lost: bool | None = None
    persistence_mode: bool | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clocks_event_reasons: int | None = None
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
        default=None, description="Set when NVML could not be initialised at all; gpus is then empty."
    )
    gpus: list[GpuSnapshot]
    unattributed_xid_events: Annotated[list[XidEvent], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list,
        description=(
            "XIDs that could not be tied to a listed GPU, e.g. a kernel-log line naming a PCI address that "
            "NVML no longer enumerates because the GPU fell off the bus (extension to v1; optional)."
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

    def gpu_by_pci(self, bus_id: str) -> GpuSnapshot | None:
        """The GPU at a PCI address, whatever its spelling (``0000:3b:00`` or ``00000000:3B:00.0``)."""
        wanted = pci_key(bus_id)
        if wanted is None:
            return None
        return next((gpu for gpu in self.gpus if gpu.pci_bus_id and pci_key(gpu.pci_bus_id) == wanted), None)


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
