"""Forgetting a node (an admin's decision: decommissioned, renamed, or a name that should never have
reported): its row, incidents, permits (with their drain orders) and requests go; its history stays, marked
with the forgetting.

A forgotten node leaves the fleet's size, so it no longer counts in the budget or the breaker; should it
report again it starts over as a new node.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import Connection, delete, select

from aggregator import readings_ring
from aggregator.store.common import record_event
from aggregator.store.tables import drains, incidents, nodes, permits, requests
from core.aggregator_api import NodeForgotten

log = structlog.get_logger(__name__)


def forget_node(conn: Connection, node: str, *, by: str, now: datetime) -> NodeForgotten | None:
    """Remove ``node`` and what hangs on it (in the caller's write transaction); None if it is unknown."""
    if conn.execute(select(nodes.c.name).where(nodes.c.name == node).with_for_update()).first() is None:
        return None
    conn.execute(delete(drains).where(drains.c.node == node))  # its permits go: their drain orders too
    removed = NodeForgotten(
        node=node,
        requests=conn.execute(delete(requests).where(requests.c.node == node)).rowcount,
        permits=conn.execute(delete(permits).where(permits.c.node == node)).rowcount,
        incidents=conn.execute(delete(incidents).where(incidents.c.node == node)).rowcount,
    )
    readings_ring.forget(conn, node)
    conn.execute(delete(nodes).where(nodes.c.name == node))
    record_event(
        conn,
        at=now,
        kind="node_forgotten",
        node=node,
        message=f"node {node} forgotten by {by}",
        details=removed.model_dump(mode="json"),
    )
    log.warning("node forgotten", node=node, by=by)
    return removed
