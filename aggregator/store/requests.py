"""Manual quarantine / release (and diag) requests that the node's agent fetches and applies.

A new request supersedes any still-pending one of the same family for the same node (quarantine and
release are one family, diag another), so the agent only ever sees the human's latest intent, and asking
for a diagnostic never cancels a quarantine. Releasing a node also lifts the repeat-offender hold: that is
the human decision it waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select, update

from aggregator.store.common import record_event
from aggregator.store.tables import nodes, requests
from core.aggregator_api import NodeRequest


class UnknownNode(LookupError):
    """The node has never reported to this aggregator."""


_FAMILIES: dict[str, tuple[str, ...]] = {
    "quarantine": ("quarantine", "release"),
    "release": ("quarantine", "release"),
    "diag": ("diag",),
}


def create(
    conn: Connection,
    node: str,
    *,
    kind: str,
    reason: str,
    requested_by: str,
    now: datetime,
    params: dict[str, Any] | None = None,
) -> NodeRequest:
    """Queue a request for the node's agent, superseding a pending one of the same family."""
    conn.execute(
        update(requests)
        .where(
            requests.c.node == node,
            requests.c.status == "pending",
            requests.c.kind.in_(_FAMILIES.get(kind, (kind,))),
        )
        .values(status="superseded", applied_at=now)
    )
    request_id = conn.execute(
        requests.insert()
        .values(
            node=node,
            kind=kind,
            reason=reason,
            requested_by=requested_by,
            created_at=now,
            status="pending",
            params=params,
        )
        .returning(requests.c.id)
    ).scalar_one()
    record_event(
        conn,
        at=now,
        kind=f"{kind}_requested",
        node=node,
        message=f"{kind} requested by {requested_by}: {reason}",
        details={"request": request_id, "requested_by": requested_by, **(params or {})},
    )
    return request_from_row(conn.execute(select(requests).where(requests.c.id == request_id)).one())


def request_by_human(
    conn: Connection, node: str, *, kind: str, reason: str, requested_by: str, now: datetime
) -> NodeRequest:
    """``gpuhealth quarantine`` / ``release``: lock the node, queue the request, update the hold."""
    row = conn.execute(select(nodes.c.hold).where(nodes.c.name == node).with_for_update()).first()
    if row is None:
        raise UnknownNode(f"node {node} has never reported to this aggregator")
    request = create(conn, node, kind=kind, reason=reason, requested_by=requested_by, now=now)
    hold = f"quarantined by {requested_by}: {reason}" if kind == "quarantine" else None
    conn.execute(update(nodes).where(nodes.c.name == node).values(hold=hold, pending_requests=1))
    return request


def mark_applied(conn: Connection, node: str, request_ids: Sequence[int], now: datetime) -> int:
    """The agent applied these requests; returns how many are still pending."""
    conn.execute(
        update(requests)
        .where(requests.c.node == node, requests.c.id.in_(list(request_ids)), requests.c.status == "pending")
        .values(status="applied", applied_at=now)
    )
    return pending_count(conn, node)


def pending_count(conn: Connection, node: str) -> int:
    """How many of the node's requests its agent has yet to apply."""
    query = (
        select(func.count())
        .select_from(requests)
        .where(requests.c.node == node, requests.c.status == "pending")
    )
    return int(conn.execute(query).scalar_one())


def pending(conn: Connection, node: str) -> list[NodeRequest]:
    """The node's requests its agent has yet to apply, oldest first."""
    query = (
        select(requests)
        .where(requests.c.node == node, requests.c.status == "pending")
        .order_by(requests.c.id)
    )
    return [request_from_row(row) for row in conn.execute(query)]


def request_from_row(row: Any) -> NodeRequest:
    """The API model of a ``requests`` row."""
    return NodeRequest(
        id=row.id,
        node=row.node,
        kind=row.kind,
        reason=row.reason,
        requested_by=row.requested_by,
        created_at=row.created_at,
        applied_at=row.applied_at,
        status=row.status,
        level=(row.params or {}).get("level"),
        force=bool((row.params or {}).get("force", False)),
    )
