"""A wall clock the fault suite can step, through the project's clock seam (``core.clock``'s ``now``).

A real clock step (an NTP step, a bad RTC after a reboot, a human's ``date -s``) moves the wall clock and
leaves the monotonic one alone; the product reads both through its clock seam (``Clock.now`` and
``Clock.monotonic`` on the agent, the ``now`` callable of the aggregator's app), so the suite steps there:
:class:`SteppedClock` is the real clock plus an offset read from a file the test writes (seconds, may be
negative), checked at most every ``REREAD_S``. Why not the machine's own clock: stepping the system clock
would step every other process on this shared machine (the other test runs, the build, the tools), and
libfaketime is not installed; the seam steps exactly the process under test.
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.clock import RealClock

REREAD_S = 0.05


class SteppedClock(RealClock):
    def __init__(self, offset_file: Path) -> None:
        self._file = offset_file
        self._lock = threading.Lock()
        self._offset = 0.0
        self._read_at = float("-inf")

    def offset(self) -> float:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= REREAD_S:
                self._read_at = now
                # no step ordered (or one half written): keep the last offset
                with contextlib.suppress(OSError, ValueError):
                    self._offset = float(self._file.read_text(encoding="utf-8").strip() or 0)
            return self._offset

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset())
