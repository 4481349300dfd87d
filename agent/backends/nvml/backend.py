"""The NVML backend: :class:`NvmlBackend` reads one node snapshot (format v1, see ``docs/snapshot.md``).

Every query is independent: a query NVML does not support becomes ``null``, a GPU that answers
``GPU_IS_LOST`` is listed as ``lost``, and a node whose driver is missing gets ``nvml_error`` with no GPUs.
XIDs collected by an :class:`~agent.backends.nvml.xid_watcher.XidBuffer` are attached to their GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import structlog

from agent.backends.nvml.reader import (
    GpuLost,
    GpuReader,
    Identity,
    NvmlUninitialised,
    read_details,
    read_identity,
)
from agent.backends.nvml.seam import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_UNINITIALIZED,
    NvmlBackendError,
    NVMLError,
    NvmlLibrary,
    NvmlSettingError,
    NvmlUnavailableError,
    error_code,
    error_name,
    initialise,
    nvml_text,
    real_library,
)
from core.clock import utc_now
from core.snapshot import GpuSnapshot, NodeSnapshot, XidEvent, xid_owner

if TYPE_CHECKING:
    from agent.backends.nvml.xid_watcher import XidBuffer

log = structlog.get_logger(__name__)

LOST_UUID_PREFIX: Final[str] = "GPU-LOST-index-"
UNREADABLE_UUID_PREFIX: Final[str] = "GPU-UNREADABLE-index-"


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
        self._identities: dict[int, Identity] = {}

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
            initialise(self._library)
        except NvmlUnavailableError as exc:
            return str(exc)
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
        except NvmlUninitialised:
            log.info("nvml_reinitialising", node=self._node)
            self._initialised = False
        try:
            return self._read_node(taken_at, events)
        except NvmlUninitialised:
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
                raise NvmlUninitialised("nvmlDeviceGetCount") from exc
            return self._unavailable(taken_at, f"nvmlDeviceGetCount failed: {error_name(code)}", events)
        self._last_failure = None
        gpus = [self._read_gpu(index) for index in range(count)]
        gpus, unattributed = attach_xids(gpus, events)
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
            return nvml_text(self._library.nvmlSystemGetDriverVersion())
        except NVMLError as exc:
            if error_code(exc) == NVML_ERROR_UNINITIALIZED:
                raise NvmlUninitialised("nvmlSystemGetDriverVersion") from exc
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
                raise NvmlUninitialised("nvmlDeviceGetHandleByIndex") from exc
            log.warning("nvml_no_handle", node=self._node, gpu=index, code=error_name(code))
            return self._placeholder(index, None, lost=code == NVML_ERROR_GPU_IS_LOST)
        reader = GpuReader(self._library, handle, index, self._node)
        try:
            identity = read_identity(reader)
        except GpuLost:
            return self._placeholder(index, None, lost=True)
        uuid = identity.uuid or self._uuid_of(index, lost=False)
        if identity.uuid is not None:
            self._identities[index] = identity
        try:
            gpu = read_details(reader, index, identity, uuid)
        except GpuLost:
            return self._placeholder(index, identity, lost=True)
        if reader.answers == 0:
            log.warning("nvml_gpu_unreadable", node=self._node, gpu=index, errors=reader.errors)
        return gpu

    def _placeholder(self, index: int, identity: Identity | None, *, lost: bool) -> GpuSnapshot:
        """A GPU we could not read: what we know of its identity, every other field null."""
        known = self._identities.get(index)
        merged = Identity(
            uuid=(identity.uuid if identity else None) or (known.uuid if known else None),
            pci_bus_id=(identity.pci_bus_id if identity else None) or (known.pci_bus_id if known else None),
            name=(identity.name if identity else None) or (known.name if known else None),
            serial=(identity.serial if identity else None) or (known.serial if known else None),
        )
        if lost:
            log.warning("nvml_gpu_lost", node=self._node, gpu=index, uuid=merged.uuid)
        return GpuSnapshot(
            index=index,
            uuid=merged.uuid or self._uuid_of(index, lost=lost),
            name=merged.name,
            pci_bus_id=merged.pci_bus_id,
            serial=merged.serial,
            lost=lost,
        )

    def _uuid_of(self, index: int, *, lost: bool) -> str:
        """The UUID remembered for this index, else a stable placeholder that says why there is none."""
        known = self._identities.get(index)
        if known is not None and known.uuid is not None:
            return known.uuid
        return f"{LOST_UUID_PREFIX if lost else UNREADABLE_UUID_PREFIX}{index}"


def attach_xids(gpus: list[GpuSnapshot], events: list[XidEvent]) -> tuple[list[GpuSnapshot], list[XidEvent]]:
    """Give each GPU its events (:func:`core.snapshot.xid_owner`), newest last; the rest are unattributed."""
    by_gpu: dict[int, list[XidEvent]] = {gpu.index: [] for gpu in gpus}
    unattributed: list[XidEvent] = []
    for event in events:
        position = xid_owner(gpus, event)
        if position is None:
            unattributed.append(event)
        else:
            by_gpu[gpus[position].index].append(event)
    attached = [
        gpu.model_copy(update={"xid_events": by_gpu[gpu.index]}) if by_gpu[gpu.index] else gpu for gpu in gpus
    ]
    return attached, unattributed
