"""Incident ids belong to their node: whatever id a node sends is resolved against that node's incidents.

Agents make their incident ids (unguessable: 64 random bits), and the store keeps them as given. An id a
node sends (its open incident, an action's incident, a permit's) is one of three:

- its own: an incident of this node (or the node-scoped id the aggregator gave it, below);
- unknown: no incident has it yet (a permit asked for before the report that opens the incident);
- foreign: another node's incident. A node never writes into it: its actions and permit events go to its
  own incident instead, and when a node *opens* an incident under an id another node holds (that node used
  it first, to hide this node's incident), the aggregator records it under a node-scoped id of its own
  making: the id cut to 111 characters, ``~`` and 16 random hex digits. No agent can send ``~`` in an id, so
  no node can take that id first; the node's later reports with its own id resolve to it by prefix.
"""

from __future__ import annotations

import secrets
from enum import Enum

from sqlalchemy import Connection, select

from aggregator.store.tables import incidents

SCOPE_MARK = "~"
_KEPT = 111  # 111 + 1 + 16 = 128, the column's length


class Owner(Enum):
    """Whose an incident id is, seen from the node that sent it."""

    OWN = "own"
    UNKNOWN = "unknown"
    FOREIGN = "foreign"


def resolve(conn: Connection, node: str, claimed: str | None) -> tuple[str | None, Owner]:
    """The stored id ``claimed`` means for ``node`` and whose it is (None, UNKNOWN for no id)."""
    if claimed is None:
        return None, Owner.UNKNOWN
    holder = conn.execute(select(incidents.c.node).where(incidents.c.id == claimed)).scalar_one_or_none()
    if holder == node:
        return claimed, Owner.OWN
    scoped = conn.execute(
        select(incidents.c.id)
        .where(incidents.c.node == node, incidents.c.id.startswith(_prefix(claimed), autoescape=True))
        .order_by(incidents.c.started_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    if scoped is not None:
        return str(scoped), Owner.OWN
    return (None, Owner.FOREIGN) if holder is not None else (claimed, Owner.UNKNOWN)


def own_or(conn: Connection, node: str, claimed: str | None, fallback: str | None) -> str | None:
    """``claimed`` resolved when it is the node's own incident, else ``fallback`` (the node's current one)."""
    resolved, owner = resolve(conn, node, claimed)
    return resolved if owner is Owner.OWN else fallback


def scoped_id(claimed: str) -> str:
    """A fresh node-scoped id for an incident whose id another node holds."""
    return _prefix(claimed) + secrets.token_hex(8)


def _prefix(claimed: str) -> str:
    return claimed[:_KEPT] + SCOPE_MARK
