"""Retention: history older than the configured days is pruned, in small batches, on a thread of its own.

What is pruned: events (except those of an incident still open), closed incidents, alerts whose every
delivery ended (delivered or dead-lettered) with those deliveries, and audit entries. What never is: an open
incident or its events, and an alert with a delivery still pending (it may yet be sent). A year of history
for 10,000 nodes stays queryable because the reads go through indexes on time; pruning keeps it bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy import Connection, delete, exists, select

from aggregator.settings import AggregatorSettings
from aggregator.store.engine import Database
from aggregator.store.tables import alert_deliveries, alerts, audit, events, incidents

log = structlog.get_logger(__name__)

BATCH = 5_000  # rows per transaction: a prune never holds the write lock for long


@dataclass(frozen=True)
class Pruned:
    """How many rows one prune removed, by kind."""

    events: int = 0
    incidents: int = 0
    alerts: int = 0
    audit: int = 0

    def total(self) -> int:
        return self.events + self.incidents + self.alerts + self.audit


def prune(database: Database, settings: AggregatorSettings, now: datetime) -> Pruned:
    """Remove what is older than the retention settings; returns the counts."""
    day = timedelta(days=1)
    return Pruned(
        events=_in_batches(
            database, lambda conn: _prune_events(conn, now - settings.retention_events_days * day)
        ),
        incidents=_in_batches(
            database, lambda conn: _prune_incidents(conn, now - settings.retention_incidents_days * day)
        ),
        alerts=_in_batches(
            database, lambda conn: _prune_alerts(conn, now - settings.retention_alerts_days * day)
        ),
        audit=_in_batches(
            database, lambda conn: _prune_audit(conn, now - settings.retention_audit_days * day)
        ),
    )


def _in_batches(database: Database, step: Callable[[Connection], int]) -> int:
    removed = 0
    while True:
        with database.write() as conn:
            count = step(conn)
        removed += count
        if count < BATCH:
            return removed


def _prune_events(conn: Connection, before: datetime) -> int:
    still_open = select(incidents.c.id).where(incidents.c.ended_at.is_(None))
    doomed = (
        select(events.c.id)
        .where(events.c.at < before)
        .where(events.c.incident_id.is_(None) | events.c.incident_id.not_in(still_open))
        .limit(BATCH)
    )
    return int(conn.execute(delete(events).where(events.c.id.in_(doomed))).rowcount or 0)


def _prune_incidents(conn: Connection, before: datetime) -> int:
    doomed = select(incidents.c.id).where(incidents.c.ended_at < before).limit(BATCH)
    return int(conn.execute(delete(incidents).where(incidents.c.id.in_(doomed))).rowcount or 0)


def _prune_alerts(conn: Connection, before: datetime) -> int:
    pending = exists().where(
        alert_deliveries.c.alert_id == alerts.c.id, alert_deliveries.c.status == "pending"
    )
    doomed = [
        row.id
        for row in conn.execute(
            select(alerts.c.id).where(alerts.c.created_at < before, ~pending).limit(BATCH)
        )
    ]
    if not doomed:
        return 0
    conn.execute(delete(alert_deliveries).where(alert_deliveries.c.alert_id.in_(doomed)))
    return int(conn.execute(delete(alerts).where(alerts.c.id.in_(doomed))).rowcount or 0)


def _prune_audit(conn: Connection, before: datetime) -> int:
    doomed = select(audit.c.id).where(audit.c.at < before).limit(BATCH)
    return int(conn.execute(delete(audit).where(audit.c.id.in_(doomed))).rowcount or 0)


class Pruner:
    """Prunes at start and then every ``prune_every_s`` on a daemon thread; ``stop()`` ends it."""

    def __init__(self, database: Database, settings: AggregatorSettings, now: Callable[[], datetime]) -> None:
        self._database = database
        self._settings = settings
        self._now = now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start pruning (again after a stop: the app's lifespan may run more than once in tests)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuhealth-retention", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pruned = prune(self._database, self._settings, self._now())
                if pruned.total():
                    log.info("history_pruned", **vars(pruned))
            except Exception:
                log.exception("history_prune_failed")
            self._stop.wait(self._settings.prune_every_s)
