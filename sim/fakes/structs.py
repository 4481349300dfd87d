# ruff: noqa: N815  -- the fields mirror pynvml's camelCase struct members
"""The values the fake NVML hands out, shaped as pynvml's ctypes structures present them.

Callers read them by attribute exactly as they read the real structures (``pci.busId``,
``field.value.uiVal``, ``event.eventData``), so code that works on the fake works on the real binding.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FakePciInfo:
    """Like ``nvmlPciInfo_t``: nvidia-ml-py 12+ decodes ``busId`` to ``str`` (older releases gave bytes)."""

    busId: str
    busIdLegacy: str
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int


@dataclass(frozen=True)
class FakeUtilization:
    """Like ``nvmlUtilization_t``: percent of the sample period a kernel (``gpu``) or memory ran."""

    gpu: int
    memory: int


@dataclass(frozen=True)
class FakeValue:
    """Like the ``c_nvmlValue_t`` union: every member shows the same number."""

    dVal: float
    uiVal: int
    ulVal: int
    ullVal: int
    sllVal: int
    siVal: int
    usVal: int

    @classmethod
    def of(cls, number: int) -> FakeValue:
        """The union holding ``number``."""
        return cls(float(number), number, number, number, number, number, number & 0xFFFF)


@dataclass(frozen=True)
class FakeFieldValue:
    """Like ``c_nvmlFieldValue_t``: check ``nvmlReturn`` before reading ``value`` by ``valueType``."""

    fieldId: int
    scopeId: int
    timestamp: int
    latencyUsec: int
    valueType: int
    nvmlReturn: int
    value: FakeValue


@dataclass(frozen=True)
class FakeProcessInfo:
    """Like ``c_nvmlProcessInfo_t``: one compute process on a GPU (``usedGpuMemory`` in bytes)."""

    pid: int
    usedGpuMemory: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True, eq=False)
class FakeDeviceHandle:
    """Stands for a ``c_nvmlDevice_t``: one per GPU, the same object on every lookup (like NVML's)."""

    node: int
    slot: int


@dataclass(frozen=True)
class FakeEventData:
    """Like ``c_nvmlEventData_t``: ``eventData`` is the XID for an XID critical error."""

    device: FakeDeviceHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True)
class InjectedXid:
    """Record of one injected XID, for code that also wants to render it as a kernel-log line."""

    slot: int
    gpu_uuid: str
    pci_bus_id: str
    xid: int
    message: str | None


@dataclass(eq=False)
class FakeEventSet:
    """Stands for a ``c_nvmlEventSet_t``."""

    node: int
    slots: set[int] = field(default_factory=set)
    pending: deque[FakeEventData | FakeDeviceHandle] = field(default_factory=deque)  # a handle = "lost"
    freed: bool = False
