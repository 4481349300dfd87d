"""Live followers: /dev/kmsg and ``journalctl -f``, each delivering XidEvents to a callback on a thread.

Both stop within a second of :meth:`stop` and never let a failing callback end the follow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Protocol, Self

import structlog

from agent.backends.kernel_log.errors import KernelLogError
from agent.backends.kernel_log.journal import kernel_message, parse_journal_json_line
from agent.backends.kernel_log.kmsg import from_userspace, parse_kmsg_record
from agent.backends.kernel_log.link_state import parse_link_line
from agent.backends.kernel_log.sxid import parse_sxid_line
from agent.backends.kernel_log.text_lines import parse_text_line
from core.child_env import child_environment
from core.clock import Clock, RealClock
from core.snapshot import LinkEvent, SxidEvent, XidEvent

log = structlog.get_logger(__name__)

XidCallback = Callable[[XidEvent], None]
FabricCallback = Callable[[SxidEvent | LinkEvent], None]
"""Receives the NVSwitch SXid and NIC link lines a follower sees (checks/fabric.py judges them)."""

DEFAULT_KMSG_PATH = "/dev/kmsg"
DEFAULT_JOURNAL_COMMAND: tuple[str, ...] = ("journalctl", "-k", "-f", "-o", "json", "-n", "0")
STOP_TIMEOUT_S = 1.0
# One /dev/kmsg read returns one whole record and fails with EINVAL if the buffer is smaller than it;
# records are at most 8 KiB (CONSOLE_EXT_LOG_MAX) including the continuation lines.
_READ_SIZE = 16384
_TERMINATE_GRACE_S = 0.5


class RecordSource(Protocol):
    """What the kmsg follower reads: /dev/kmsg, a FIFO or a regular file opened unbuffered, or a fake."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Up to ``size`` bytes; None when nothing is ready (non-blocking), ``b""`` at end of a file."""
        ...

    def close(self) -> None:
        """Release the source."""
        ...


class _Follower(ABC):
    """Runs :meth:`_run` on a daemon thread from :meth:`start` until :meth:`stop`."""

    def __init__(self, callback: XidCallback, *, name: str, fabric: FabricCallback | None = None) -> None:
        self._callback = callback
        self._fabric = fabric
        self._name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the follow thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Begin following; raises :class:`KernelLogError` when the source cannot be opened."""
        if self.running:
            return
        self._stopping.clear()
        self._prepare()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        log.info("kernel log follower started", follower=self._name)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop following and wait (at most ``timeout`` seconds) for the thread to end."""
        self._stopping.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
        log.info("kernel log follower stopped", follower=self._name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def _deliver(self, event: XidEvent) -> None:
        try:
            self._callback(event)
        except Exception:  # a faulty consumer must not end the follow; it is logged instead
            log.exception("xid callback failed", follower=self._name, xid=event.xid)

    def _deliver_fabric(self, text: str) -> None:
        """An SXid or a NIC link line goes to the fabric callback, when there is one."""
        if self._fabric is None:
            return
        event = parse_sxid_line(text) or parse_link_line(text)
        if event is None:
            return
        try:
            self._fabric(event)
        except Exception:  # a failing callback must not end the follow
            log.exception("fabric callback failed", follower=self._name)

    @abstractmethod
    def _prepare(self) -> None:
        """Open what the thread will read (runs in :meth:`start`, so errors reach the caller)."""

    @abstractmethod
    def _interrupt(self) -> None:
        """Wake the thread if it is blocked (runs in :meth:`stop`)."""

    @abstractmethod
    def _run(self) -> None:
        """The follow loop; returns once :attr:`_stopping` is set."""


class KmsgFollower(_Follower):
    """Follows /dev/kmsg (or a FIFO or file in the same record format) and delivers the XIDs it reads.

    Starts at the end of the buffer unless ``from_start``. Record times count from boot; an event gets
    ``at`` = boot time (``clock.now() - clock.monotonic()``) + the record's offset: an estimate, because the
    kernel stamps records with its scheduler clock, which NTP does not slew, so over a long uptime it can
    differ from CLOCK_MONOTONIC by seconds. When records are overwritten before
    they are read, the kernel answers one read with EPIPE and the next read continues: we count and log it.
    """

    def __init__(
        self,
        callback: XidCallback,
        *,
        path: str = DEFAULT_KMSG_PATH,
        from_start: bool = False,
        clock: Clock | None = None,
        opener: Callable[[str], RecordSource] | None = None,
        poll_interval: float = 0.2,
        fabric: FabricCallback | None = None,
    ) -> None:
        super().__init__(callback, name=f"kmsg-follower:{path}", fabric=fabric)
        self._path = path
        self._from_start = from_start
        self._clock: Clock = clock or RealClock()
        self._opener = opener or self._open_unbuffered
        self._poll_interval = poll_interval
        self._source: RecordSource | None = None
        self._boot_time: datetime | None = None
        self.lost_reads = 0

    def _prepare(self) -> None:
        self._source = self._opener(self._path)
        self._boot_time = self._clock.now() - timedelta(seconds=self._clock.monotonic())

    def _interrupt(self) -> None:
        """Nothing to wake: reads never block, and the idle wait ends as soon as stop() is requested."""

    def _open_unbuffered(self, path: str) -> RecordSource:
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise KernelLogError(f"{path}: cannot read kernel log: {exc.strerror or exc}") from exc
        if not self._from_start:
            # A FIFO cannot seek (ESPIPE), and needs not: it only carries what is written from now on.
            with contextlib.suppress(OSError):
                os.lseek(descriptor, 0, os.SEEK_END)
        return os.fdopen(descriptor, "rb", buffering=0)

    def _run(self) -> None:
        source = self._source
        if source is None:  # pragma: no cover - start() always prepares a source
            return
        pending = b""
        try:
            while not self._stopping.is_set():
                chunk = self._read(source)
                if not chunk:
                    self._stopping.wait(self._poll_interval)
                    continue
                *records, pending = (pending + chunk).split(b"\n")
                for record in records:
                    self._handle(record.decode("utf-8", errors="replace"))
        finally:
            source.close()

    def _read(self, source: RecordSource) -> bytes | None:
        try:
            return source.read(_READ_SIZE)
        except BrokenPipeError:
            self.lost_reads += 1
            log.warning(
                "kmsg records were overwritten before they were read", path=self._path, lost=self.lost_reads
            )
            return None
        except OSError as exc:
            log.error("kmsg read failed", path=self._path, error=str(exc))
            return None

    def _handle(self, line: str) -> None:
        if not line.strip() or line.startswith(" "):  # blank, or a record's " KEY=value" continuation
            return
        if from_userspace(line):  # a program wrote it to /dev/kmsg: a quote, never the kernel's report
            return
        record = parse_kmsg_record(line)
        text = line if record is None else record.message
        event = parse_text_line(text)
        if event is None:
            self._deliver_fabric(text)
            return
        if record is not None and event.at is None and self._boot_time is not None:
            event = event.model_copy(
                update={"at": self._boot_time + timedelta(microseconds=record.monotonic_us)}
            )
        self._deliver(event)


class JournalFollower(_Follower):
    """Runs ``journalctl -k -f -o json`` (no shell) and delivers the XIDs of the entries it prints.

    When journalctl exits, it is started again after ``restart_delay`` seconds, doubling up to
    ``max_restart_delay`` while it keeps failing; a run that lasted ``max_restart_delay`` resets the delay.
    """

    def __init__(
        self,
        callback: XidCallback,
        command: Sequence[str] = DEFAULT_JOURNAL_COMMAND,
        *,
        restart_delay: float = 1.0,
        max_restart_delay: float = 30.0,
        fabric: FabricCallback | None = None,
    ) -> None:
        name = f"journal-follower:{command[0] if command else '?'}"
        super().__init__(callback, name=name, fabric=fabric)
        self._command = tuple(command)
        self._restart_delay = restart_delay
        self._max_restart_delay = max_restart_delay
        self._process: subprocess.Popen[bytes] | None = None
        self._process_lock = threading.Lock()
        self.restarts = 0

    def _prepare(self) -> None:
        if not self._command or shutil.which(self._command[0]) is None:
            name = self._command[0] if self._command else "(empty command)"
            raise KernelLogError(f"{name}: cannot follow the journal: command not found")

    def _run(self) -> None:
        delay = self._restart_delay
        while not self._stopping.is_set():
            started = time.monotonic()
            exit_code = self._follow_once()
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= self._max_restart_delay:
                delay = self._restart_delay
            log.warning("journalctl exited; restarting", exit_code=exit_code, delay_s=delay)
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            delay = min(delay * 2, self._max_restart_delay)

    def _follow_once(self) -> int | None:
        """Run the command until it exits (or is terminated); its exit code, None if it could not start."""
        try:
            process = subprocess.Popen(
                self._command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=child_environment(),  # never the agent's tokens
            )
        except OSError as exc:
            log.error("journalctl could not be started", command=self._command[0], error=str(exc))
            return None
        with self._process_lock:
            self._process = process
        if self._stopping.is_set():  # stop() ran before the process was visible to it
            self._interrupt()
        assert process.stdout is not None  # stdout=PIPE above
        with process.stdout:
            for raw in process.stdout:
                text = raw.decode("utf-8", errors="replace")
                event = parse_journal_json_line(text)
                if event is not None:
                    self._deliver(event)
                elif self._fabric is not None:
                    message = kernel_message(text)  # the kernel's own entries only (_TRANSPORT)
                    if message is not None:
                        self._deliver_fabric(message)
        return process.wait()

    def _interrupt(self) -> None:
        with self._process_lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(_TERMINATE_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
