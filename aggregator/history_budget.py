"""A bound on the history rows one node's reports write: ``history_rows_per_node_per_minute``.

Reports are the one way a node writes into the shared history, and nothing else limited it: a node sending
a thousand actions a second pushed every other node out of ``/v1/events``. Each node gets this many rows of
its own timeline (its actions, its findings and state changes, its epochs) a minute, counted on arrival by
the aggregator's clock (a node chooses its actions' times, not when they arrive). What goes over is never
dropped silently: it is counted, and one summary row per node and minute says how many rows of which kinds
(and of which incidents) were not written, updated as more go over. The rows the fleet rules read are never
held back: a node turning unhealthy (the breaker counts them) and an incident opening or closing (the
repeat-offender rule counts them, and alerts follow them).

The count is per aggregator process: with several replicas a node may write up to that many times the bound.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, update

from aggregator.store.tables import events

WINDOW = timedelta(minutes=1)
LIMITED = "history_limited"
MAX_NAMED_INCIDENTS = 20
_MAX_TRACKED = 100_000  # nodes whose window is remembered; past it, the lapsed windows are forgotten


@dataclass
class _Window:
    start: datetime
    written: int = 0
    held_back: Counter[str] = field(default_factory=Counter)
    incidents: list[str] = field(default_factory=list)
    summary_id: int | None = None


class HistoryBudget:
    """The per-node, per-minute bound (thread-safe: the report writers share it)."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def admit(self, node: str, kind: str, incident_id: str | None, now: datetime) -> bool:
        """Whether one more row of ``node`` may be written now; if not, it is counted as held back."""
        with self._lock:
            window = self._window(node, now)
            if window.written < self.per_minute:
                window.written += 1
                return True
            window.held_back[kind] += 1
            if (
                incident_id
                and incident_id not in window.incidents
                and len(window.incidents) < MAX_NAMED_INCIDENTS
            ):
                window.incidents.append(incident_id)
            return False

    def summarise(self, conn: Connection, node: str, now: datetime) -> None:
        """Write (or bring up to date) the node's summary row of this minute, if anything was held back."""
        with self._lock:
            window = self._windows.get(node)
            if window is None or not window.held_back:
                return
            total = sum(window.held_back.values())
            values: dict[str, Any] = {
                "message": f"{total} history rows of this node not written: over "
                f"history_rows_per_node_per_minute ({self.per_minute}) since {window.start:%H:%M:%S}Z",
                "details": {
                    "held_back": total,
                    "by_kind": dict(sorted(window.held_back.items())),
                    "incidents": list(window.incidents),
                    "window_start": window.start.isoformat(),
                },
            }
            summary_id = window.summary_id
        if summary_id is not None:
            updated = conn.execute(update(events).where(events.c.id == summary_id).values(**values))
            if updated.rowcount:
                return
        inserted = conn.execute(
            events.insert()
            .values(at=now, node=node, incident_id=None, kind=LIMITED, **values)
            .returning(events.c.id)
        ).scalar_one()
        with self._lock:
            if self._windows.get(node) is window:
                window.summary_id = int(inserted)

    def _window(self, node: str, now: datetime) -> _Window:
        window = self._windows.get(node)
        if window is None or now - window.start >= WINDOW or now < window.start:
            if len(self._windows) >= _MAX_TRACKED:
                self._windows = {n: w for n, w in self._windows.items() if now - w.start < WINDOW}
            window = self._windows[node] = _Window(start=now)
        return window
