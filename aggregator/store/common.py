"""Small helpers shared by the repository modules."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from aggregator.store.tables import events
from core.aggregator_api import Event


def insert_ignoring_conflict(conn: Connection, table: Table, values: dict[str, Any]) -> None:
    """INSERT that does nothing when the primary key exists (another transaction got there first)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).values(**values).on_conflict_do_nothing())


REPEAT_WINDOW = timedelta(minutes=15)
"""A repeated line joins the first one's row while that began at most this long ago, then starts a new
row: one row stays a readable range, and ``--since`` still finds a long streak's recent part."""

REPEAT = "repeat"  # the details key of a row's repeats: {"count": n, "last_at": iso time}


def record_event(
    conn: Connection,
    *,
    at: datetime,
    kind: str,
    message: str,
    node: str | None = None,
    incident_id: str | None = None,
    details: dict[str, Any] | None = None,
    repeatable: bool = False,
) -> None:
    """Append one line to the history (in the caller's transaction, so it commits with the change).

    ``repeatable``: the same line again for the same node (kind, incident, message and details equal to
    its last line of that kind, within ``REPEAT_WINDOW``) only counts up that row's repeats and moves its
    last time; the row keeps its first time, so the history says "x30, from .. to ..".
    """
    values = {
        "at": at,
        "kind": kind,
        "message": message,
        "node": node,
        "incident_id": incident_id,
        "details": details or {},
    }
    if repeatable and node is not None and _counted_as_repeat(conn, values):
        return
    conn.execute(_INSERT_EVENT, values)


# Built once, with their values bound at execution: a burst's reports write several rows each, and building
# the statement per row (operators, bind parameters, its cache key) was most of the cost of a row.
_INSERT_EVENT = events.insert()
_LAST_OF_KIND = (
    select(events.c.id, events.c.at, events.c.message, events.c.incident_id, events.c.details)
    .where(events.c.node == bindparam("last_node"), events.c.kind == bindparam("last_kind"))
    .order_by(events.c.at.desc(), events.c.id.desc())
    .limit(1)
)


def _counted_as_repeat(conn: Connection, values: dict[str, Any]) -> bool:
    """Whether the line in ``values`` repeats its node's last line of its kind (and was counted there)."""
    at: datetime = values["at"]
    last = conn.execute(_LAST_OF_KIND, {"last_node": values["node"], "last_kind": values["kind"]}).first()
    if last is None or last.message != values["message"] or last.incident_id != values["incident_id"]:
        return False
    stored = dict(last.details or {})
    repeat = stored.pop(REPEAT, None) or {}
    if stored != values["details"] or not timedelta(0) <= at - last.at <= REPEAT_WINDOW:
        return False
    count = int(repeat.get("count", 1)) + 1
    conn.execute(
        update(events)
        .where(events.c.id == last.id)
        .values(details=stored | {REPEAT: {"count": count, "last_at": at.isoformat()}})
    )
    return True


def event_from_row(row: Any) -> Event:
    """The API model of an ``events`` row (its repeats as ``count`` and ``last_at``)."""
    details = dict(row.details or {})
    repeat = details.pop(REPEAT, None) or {}
    return Event(
        id=row.id,
        at=row.at,
        node=row.node,
        incident_id=row.incident_id,
        kind=row.kind,
        message=row.message,
        details=details,
        count=int(repeat.get("count", 1)),
        last_at=repeat.get("last_at"),
    )
