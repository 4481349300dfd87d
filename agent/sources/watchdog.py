"""A watchdog on the detectors: every call into NVML, DCGM or another reader gets a deadline.

A detector can hang instead of failing: NVML calls block on a GPU that is falling off the bus, ``dcgmi`` and
DCGM's health calls have been seen blocking for tens of seconds on a degrading GB200 (NVSentinel issue 1748),
an exporter stops answering. The loop must never wait on them: the taint for a fault another source saw
(an XID in the kernel log) still has to go out on time. So each detector's call runs on a worker thread of
its own, and the loop waits at most ``timeout_s`` for it. A call past its deadline is a :class:`Stall`: the
caller turns the readings it would have given into "unknown, with their age" (never a fault, never a
recovery), and while that call is still hanging no second one is started (threads do not pile up); the
detector is asked again once it answers. Stalls are counted (:meth:`Deadline.stats`) for the metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

import structlog

from core.dcgm import DcgmReadings
from core.snapshot import NodeSnapshot

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

DEFAULT_TIMEOUT_S = 10.0
IDLE_EXIT_S = 120.0  # a worker with no call for this long ends; the next call starts another


@dataclass(frozen=True, slots=True)
class Stall:
    """A detector call that has not answered within its deadline."""

    detector: str
    waited_s: float

    def describe(self) -> str:
        return f"{self.detector} call has not answered for {self.waited_s:.0f} s (watchdog)"


@dataclass(frozen=True, slots=True)
class DetectorStats:
    """One detector for the metrics: calls that missed their deadline, and how long the current one hangs."""

    stalls: int
    stalled_s: float


class _Call(Generic[_T]):
    def __init__(self, started: float) -> None:
        self.started = started
        self.done = threading.Event()
        self.result: _T | None = None
        self.error: BaseException | None = None
        self.counted = False


class Deadline:
    """Runs one detector's calls on a worker thread of its own, each allowed ``timeout_s`` before it is a
    stall.

    The worker is kept between calls (an agent asks its detectors every pass; starting a thread each time
    cost more than the fake NVML's whole snapshot, and in a burst every woken agent waited for its new
    thread to be scheduled) and ends after ``IDLE_EXIT_S`` without work, so an agent that is closed leaves
    no thread behind for long. A call that hangs keeps the worker: no second call is started meanwhile.
    """

    def __init__(
        self,
        detector: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.detector = detector
        self.timeout_s = timeout_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._pending: _Call[object] | None = None
        self._next: tuple[_Call[object], Callable[[], object]] | None = None
        self._worker: threading.Thread | None = None
        self._stalls = 0

    def run(self, call: Callable[[], _T]) -> _T | Stall:
        """The call's result, or a :class:`Stall` once ``timeout_s`` has passed (or a previous call still
        hangs). An exception of the call is raised here, as if it had been called directly."""
        with self._lock:
            pending = self._pending
            now = self._monotonic()
            if pending is not None and not pending.done.is_set():
                return Stall(self.detector, now - pending.started)
            current: _Call[_T] = _Call(now)
            self._pending = current  # type: ignore[assignment]
            self._next = (current, call)  # type: ignore[assignment]
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._serve, name=f"watchdog:{self.detector}", daemon=True
                )
                self._worker.start()
            self._work_ready.notify()
        if not current.done.wait(self.timeout_s):
            with self._lock:
                if not current.counted:
                    current.counted = True
                    self._stalls += 1
            log.warning("detector_stalled", detector=self.detector, timeout_s=self.timeout_s)
            return Stall(self.detector, self._monotonic() - current.started)
        if current.error is not None:
            raise current.error
        return current.result  # type: ignore[return-value]

    def _serve(self) -> None:
        """The worker: run each call handed over, until ``IDLE_EXIT_S`` pass without one."""
        while True:
            with self._lock:
                if self._next is None:
                    self._work_ready.wait(IDLE_EXIT_S)
                if self._next is None:
                    self._worker = None
                    return
                current, call = self._next
                self._next = None
            self._work(current, call)

    @staticmethod
    def _work(current: _Call[_T], call: Callable[[], _T]) -> None:
        try:
            current.result = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            current.error = exc
        finally:
            current.done.set()

    def stats(self) -> DetectorStats:
        """Stalls so far, and for how long the call in flight has hung (0 when none hangs)."""
        with self._lock:
            pending = self._pending
            hanging = pending is not None and not pending.done.is_set() and pending.counted
            stalled = self._monotonic() - pending.started if hanging and pending is not None else 0.0
            return DetectorStats(self._stalls, stalled)


def detector_stats(deadlines: Iterable[Deadline]) -> Callable[[], Mapping[str, DetectorStats]]:
    """What the metrics read at each scrape: every watched detector's stats by name."""
    watched = tuple(deadlines)
    return lambda: {deadline.detector: deadline.stats() for deadline in watched}


class SnapshotReader(Protocol):
    """Reads one node snapshot (the NVML backend, the fabric source around it)."""

    def snapshot(self) -> NodeSnapshot: ...


class WatchedSnapshots:
    """The NVML snapshot under a deadline: a hung NVML reads as ``nvml_error`` (unknown) with its age."""

    def __init__(
        self, source: SnapshotReader, deadline: Deadline, *, node: str, now: Callable[[], datetime]
    ) -> None:
        self._source = source
        self.deadline = deadline
        self._node = node
        self._now = now

    def snapshot(self) -> NodeSnapshot:
        outcome = self.deadline.run(self._source.snapshot)
        if isinstance(outcome, Stall):
            return NodeSnapshot(node=self._node, taken_at=self._now(), nvml_error=outcome.describe(), gpus=[])
        return outcome


class ReadingsReader(Protocol):
    """A DCGM reading source (dcgm-exporter, dcgmi health)."""

    def read(self, snapshot: NodeSnapshot) -> DcgmReadings: ...


class WatchedReadings:
    """A DCGM source under a deadline: a stalled scrape or ``dcgmi`` run reads as that source's error."""

    def __init__(
        self, source: ReadingsReader, deadline: Deadline, *, stalled: Callable[[str], DcgmReadings]
    ) -> None:
        self._source = source
        self.deadline = deadline
        self._stalled = stalled

    def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
        outcome = self.deadline.run(lambda: self._source.read(snapshot))
        return self._stalled(outcome.describe()) if isinstance(outcome, Stall) else outcome
