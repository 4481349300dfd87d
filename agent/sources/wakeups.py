"""What wakes the agent loop between two polls: XIDs as they happen, and changes made to the node.

An XID must not wait for the next interval (that is how fault-to-taint stays under a second): each event
is put where the next snapshot picks it up, and the loop's wake event is set at once. A change on the node
seen by the executor's watch (a human removed our taint) wakes it too, so drift is repaired promptly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from agent.backends.kernel_log import KernelLogError, attach_kernel_xids
from agent.backends.nvml.seam import NvmlBackendError
from agent.backends.nvml.xid_watcher import XidBuffer
from core.findings import Action, Finding, Status
from core.snapshot import NodeSnapshot, XidEvent
from remediation.executor.contract import NodeExecutor

log = structlog.get_logger(__name__)

XidCallback = Callable[[XidEvent], None]
WATCHER_RETRY_S = 60.0


class EventThread(Protocol):
    """An XID producer with its own thread: ``XidWatcher``, ``KmsgFollower``, ``JournalFollower``."""

    @property
    def running(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> object: ...


class XidFeed:
    """Runs the NVML XID watcher and the optional kernel-log follower, and wakes the loop on each event.

    NVML events go into ``nvml_buffer`` (the backend attaches them to their GPU in the next snapshot).
    Kernel-log events are kept apart and merged with :func:`attach_kernel_xids`, which drops the kernel
    line of a fault NVML already reported: one XID must not count twice. A watcher that cannot start (no
    driver yet) is tried again at most every ``retry_s`` seconds; a watcher is single-use, hence factories.
    """

    def __init__(
        self,
        *,
        wake: threading.Event,
        nvml_buffer: XidBuffer,
        watcher_factory: Callable[[XidCallback], EventThread] | None = None,
        follower_factory: Callable[[XidCallback], EventThread] | None = None,
        retry_s: float = WATCHER_RETRY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wake = wake
        self._nvml_buffer = nvml_buffer
        self._kernel_buffer = XidBuffer()
        self._watcher_factory = watcher_factory
        self._follower_factory = follower_factory
        self._retry_s = retry_s
        self._monotonic = monotonic
        self._watcher: EventThread | None = None
        self._follower: EventThread | None = None
        self._next_watcher_try = 0.0
        self._follower_lost_at: float | None = None  # its thread ended: it delivers nothing any more
        self._next_follower_try = 0.0

    @property
    def watching(self) -> bool:
        """Whether the NVML XID watcher is running."""
        return self._watcher is not None and self._watcher.running

    def on_nvml_xid(self, event: XidEvent) -> None:
        """Sink for the NVML watcher (called on its thread)."""
        self._nvml_buffer.append(event)
        self._wake.set()

    def on_kernel_xid(self, event: XidEvent) -> None:
        """Callback of the kernel-log follower (called on its thread)."""
        self._kernel_buffer.append(event)
        self._wake.set()

    def start(self) -> None:
        """Start the follower (a failure is logged: NVML polling still works) and try the watcher."""
        if self._follower_factory is not None:
            follower = self._follower_factory(self.on_kernel_xid)
            try:
                follower.start()
            except KernelLogError as exc:
                log.error("kernel_log_unavailable", error=str(exc))
            else:
                self._follower = follower
        self.ensure_watching()

    def ensure_watching(self) -> None:
        """Start the NVML watcher if it is not running and the retry pause has passed; notice a kernel-log
        follower whose thread ended (it would deliver nothing, silently) and start a new one."""
        self._watch_follower()
        if self._watcher_factory is None or self.watching or self._monotonic() < self._next_watcher_try:
            return
        self._next_watcher_try = self._monotonic() + self._retry_s
        watcher = self._watcher_factory(self.on_nvml_xid)
        try:
            watcher.start()
        except NvmlBackendError as exc:
            log.warning("xid_watch_unavailable", error=str(exc), retry_in_s=self._retry_s)
            return
        self._stop_thread(self._watcher)
        self._watcher = watcher

    def _watch_follower(self) -> None:
        follower = self._follower
        if follower is None or follower.running or self._follower_factory is None:
            return
        now = self._monotonic()
        if self._follower_lost_at is None:
            self._follower_lost_at = now
            log.error("kernel_log_follower_stopped")
        if now < self._next_follower_try:
            return
        self._next_follower_try = now + self._retry_s
        replacement = self._follower_factory(self.on_kernel_xid)
        try:
            replacement.start()
        except KernelLogError as exc:
            log.error("kernel_log_unavailable", error=str(exc))
            return
        self._follower, self._follower_lost_at = replacement, None
        log.info("kernel_log_follower_restarted")

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]:
        """``KERNEL_LOG_STOPPED`` (unknown) while the kernel-log follower delivers nothing (a finding source:
        kernel-log XIDs and fabric lines are blind then, which must not read as "all is well")."""
        del snapshot
        lost = self._follower_lost_at
        if lost is None:
            return []
        message = f"the kernel-log follower stopped {self._monotonic() - lost:.0f} s ago; restarting it"
        return [
            Finding(
                check="kernel_log",
                gpu=None,
                status=Status.UNKNOWN,
                code="KERNEL_LOG_STOPPED",
                message=message,
                action=Action.NONE,
            )
        ]

    def merge_kernel_events(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        """The snapshot with the kernel-log XIDs received since the last call attached to their GPUs."""
        events = self._kernel_buffer.drain_all()
        return attach_kernel_xids(snapshot, events) if events else snapshot

    def stop(self) -> None:
        """Stop the watcher and the follower."""
        self._stop_thread(self._watcher)
        self._stop_thread(self._follower)
        self._watcher = self._follower = None

    @staticmethod
    def _stop_thread(thread: EventThread | None) -> None:
        if thread is not None:
            thread.stop()


class NodeChangeRelay:
    """A thread that turns ``executor.wait_for_change`` into a wake-up of the loop."""

    def __init__(
        self, executor: NodeExecutor, wake: threading.Event, *, name: str, slice_s: float = 1.0
    ) -> None:
        self._executor = executor
        self._wake = wake
        self._slice_s = slice_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.changes = 0

    def start(self) -> None:
        """Start relaying."""
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop relaying (returns within about one ``slice_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                changed = self._executor.wait_for_change(self._slice_s)
            except Exception:  # the relay must outlive a failing watch; the periodic tick still runs
                log.exception("node_watch_failed")
                self._stop.wait(self._slice_s)
                continue
            if changed:
                self.changes += 1
                self._wake.set()
