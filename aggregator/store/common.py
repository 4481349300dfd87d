"""Small helpers shared by the repository modules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite

from aggregator.store.tables import events
from core.aggregator_api import Event


def insert_ignoring_conflict(conn: Connection, table: Table, values: dict[str, Any]) -> None:
    """INSERT that does nothing when the primary key exists (another transaction got there first)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).values(**values).on_conflict_do_nothing())


def record_event(
    conn: Connection,
    *,
    at: datetime,
    kind: str,
    message: str,
    node: str | None = None,
    incident_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one line to the history (in the caller's transaction, so it commits with the change)."""
    conn.execute(
        events.insert().values(
            at=at, kind=kind, message=message, node=node, incident_id=incident_id, details=details or {}
        )
    )


def event_from_row(row: Any) -> Event:
    """The API model of an ``events`` row."""
    return Event(
        id=row.id,
        at=row.at,
        node=row.node,
        incident_id=row.incident_id,
        kind=row.kind,
        message=row.message,
        details=row.details or {},
    )
