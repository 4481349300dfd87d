"""The audit log: every mutating call with who made it, with which role, what, to what, from where.

Rows are written in the same transaction as the change they describe, so a change without its audit row
(or the reverse) cannot be committed. Agents' reports are not audited: they are most of the traffic, and
what they change is already in each node's history, bound to the node's own identity.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from aggregator.store.tables import audit
from core.aggregator_api import AuditEntry

MAX_LISTED = 1000


def record(
    conn: Connection,
    *,
    at: datetime,
    actor: str,
    role: str,
    method: str,
    client: str,
    action: str,
    target: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one audit row (in the caller's write transaction)."""
    conn.execute(
        audit.insert().values(
            at=at,
            actor=actor,
            role=role,
            method=method,
            client=client[:64],
            action=action,
            target=target,
            details=details or {},
        )
    )


def entries(
    conn: Connection, *, since: datetime | None = None, actor: str | None = None, limit: int = 200
) -> list[AuditEntry]:
    """Audit rows oldest first: the newest ``limit`` of those since ``since`` (by ``actor`` if given)."""
    query = select(audit).order_by(audit.c.id.desc()).limit(min(limit, MAX_LISTED))
    if since is not None:
        query = query.where(audit.c.at >= since)
    if actor is not None:
        query = query.where(audit.c.actor == actor)
    rows = list(conn.execute(query))
    return [
        AuditEntry(
            id=row.id,
            at=row.at,
            actor=row.actor,
            role=row.role,
            method=row.method,
            action=row.action,
            target=row.target,
            client=row.client,
            details=row.details or {},
        )
        for row in reversed(rows)
    ]
