"""XID events from NVML, as they happen.

:class:`XidWatcher` runs NVML's XID event set on a daemon thread and hands each XID to a callback or a
queue the moment it happens; :class:`XidBuffer` holds them until the next snapshot
(:class:`agent.backends.nvml.backend.NvmlBackend` drains it).
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Self

import structlog

from agent.backends.nvml.reader import GpuLost, GpuReader, NvmlUninitialised, read_identity
from agent.backends.nvml.seam import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    NvmlBackendError,
    NVMLError,
    NvmlLibrary,
    NvmlSettingError,
    NvmlUnavailableError,
    error_code,
    error_name,
    initialise,
    nvmlEventTypeXidCriticalError,
    real_library,
)
from core.clock import utc_now
from core.snapshot import XidEvent

log = structlog.get_logger(__name__)

MAX_WATCH_TIMEOUT_MS: Final[int] = 200


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
        initialise(self._library)
        self._initialised = True
        try:
            self._event_set = self._library.nvmlEventSetCreate()
            self._register_all()
        except (NVMLError, NvmlUninitialised) as exc:
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
                reader = GpuReader(self._library, handle, index, node="")
                identity = read_identity(reader)
                self._library.nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, self._event_set)
            except GpuLost:
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
