"""On-demand deep diagnostics: ``gpuhealth diag NODE --level N`` queued for the node's agent.

The request rides the same durable path as a quarantine (``requests`` table, handed to the agent with its
next report's answer, acknowledged by the report after). Unlike a quarantine it sets no hold: the node's
agent decides whether it may run now (a busy node refuses unless forced) and reports the outcome, which
lands in the node's timeline as an ``action`` event named ``diag``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select, update

from aggregator.store.requests import UnknownNode, create
from aggregator.store.tables import nodes
from core.aggregator_api import DiagRequest, NodeRequest


def request_diag(
    conn: Connection, node: str, body: DiagRequest, now: datetime, *, requested_by: str
) -> NodeRequest:
    """Queue a diagnostic for the node's agent (superseding a pending one); UnknownNode if never seen.

    ``requested_by`` is the authenticated caller; the body's field is ignored."""
    known = conn.execute(select(nodes.c.name).where(nodes.c.name == node).with_for_update()).first()
    if known is None:
        raise UnknownNode(f"node {node} has never reported to this aggregator")
    request = create(
        conn,
        node,
        kind="diag",
        reason=body.reason,
        requested_by=requested_by,
        now=now,
        params={"level": body.level, "force": body.force},
    )
    conn.execute(update(nodes).where(nodes.c.name == node).values(pending_requests=1))
    return request
