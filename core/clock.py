"""The emulator's clock: real time in the demo, a manual clock in tests.

Grace periods, ``tolerationSeconds`` and controller delays run on this clock, so a test can move time
forward instead of sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the emulator needs from time."""

    def now(self) -> datetime:
        """Current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic scale, for durations."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once, ``delay`` seconds from now on this clock (on a timer thread)."""
        ...


class RealClock:
    """Wall-clock time; timers run on daemon ``threading.Timer`` threads."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        timer = threading.Timer(max(delay, 0.0), callback)
        timer.daemon = True
        timer.start()
        return timer


@dataclass(order=True)
class _Scheduled:
    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when a test calls :meth:`advance`; due timers fire inside ``advance``."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0
        self._timers: list[_Scheduled] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        with self._lock:
            entry = _Scheduled(self._elapsed + max(delay, 0.0), next(self._seq), callback)
            heapq.heappush(self._timers, entry)
        return entry

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer that falls due, in due order, at its due time."""
        target = self._elapsed + seconds
        while True:
            with self._lock:
                if not self._timers or self._timers[0].due > target:
                    break
                entry = heapq.heappop(self._timers)
                self._elapsed = max(self._elapsed, entry.due)
            if not entry.cancelled:
                entry.callback()
        self._elapsed = target


def utc_now() -> datetime:
    """The current wall-clock time in UTC, for code that has no ``Clock`` of its own to ask."""
    return datetime.now(UTC)
