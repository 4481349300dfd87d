"""The readings ring: each node's last few GPU readings, so an incident carries the readings around it.

A report's GPU readings replace the node's row in ``nodes`` (the latest only). So that the evidence for a
hardware return shows what a GPU read *before* it failed, and *after*, the aggregator also keeps a small
ring per node: at most ``RING_SIZE`` samples (one row each in ``readings_ring``, slot ``0 .. RING_SIZE - 1``,
the oldest overwritten), a sample at most every ``SAMPLE_EVERY`` and always when the node's incident opens
or closes. Bounded: ``RING_SIZE`` rows a node whatever its age (8 rows of up to 64 GPUs' readings).

When an incident opens, the ring (the samples before it) is copied into its ``incident_opened`` history
line (``readings_before``); when it closes, the ring's samples taken during it go into ``incident_closed``
(``readings_during``); and the next ``AFTER_SAMPLES`` samples after its release each become one
``incident_readings_after`` line of its history (unless another incident opens first), so the readings
after a repair stay with the incident once the ring has moved on. ``GET /v1/nodes/{node}`` carries the ring
as it is now (``recent_readings``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, select, update

from aggregator.store.common import record_event
from aggregator.store.tables import nodes, readings_ring

RING_SIZE = 8
"""Samples kept per node."""
SAMPLE_EVERY = timedelta(minutes=5)
"""The least time between two samples of a node (an incident's opening or closing is always sampled)."""
AFTER_SAMPLES = 3
"""Samples after an incident's release kept in its history (at least 15 minutes of them)."""
AFTER_KIND = "incident_readings_after"


def samples(conn: Connection, node: str, *, incident_id: str | None = None) -> list[dict[str, Any]]:
    """The node's samples, oldest first (``incident_id``: only those taken while it was open), each
    ``{"at", "incident_id", "readings": {uuid: readings}}``."""
    query = select(readings_ring.c.at, readings_ring.c.incident_id, readings_ring.c.readings).where(
        readings_ring.c.node == node
    )
    if incident_id is not None:
        query = query.where(readings_ring.c.incident_id == incident_id)
    return [
        {"at": row.at.isoformat(), "incident_id": row.incident_id, "readings": row.readings}
        for row in conn.execute(query.order_by(readings_ring.c.at, readings_ring.c.slot))
    ]


def due(row: Any, incident_id: str | None, now: datetime) -> bool:
    """Whether the node's next sample is due (``row``: the node's decision columns, with
    ``readings_sampled_at``; ``incident_id``: its incident after this report)."""
    last = row.readings_sampled_at
    return last is None or now - last >= SAMPLE_EVERY or incident_id != row.incident_id


def sample(
    conn: Connection,
    node: str,
    readings: dict[str, Any],
    *,
    row: Any,
    incident_id: str | None,
    now: datetime,
) -> None:
    """Put the report's ``readings`` into the node's ring in the next slot (``row``: the node's decision
    columns, with the ring's bookkeeping); the caller asked :func:`due` first. A sample after a release
    also goes into the released incident's history, ``AFTER_SAMPLES`` times."""
    if not readings:
        return
    after_incident, after_left = row.readings_after_incident, int(row.readings_after_left or 0)
    if row.incident_id is not None and incident_id != row.incident_id:  # released (or replaced) now
        after_incident, after_left = row.incident_id, AFTER_SAMPLES
    elif incident_id is not None:  # another incident is open: its readings are its own
        after_incident, after_left = None, 0
    elif after_incident is not None and after_left > 0:
        number = AFTER_SAMPLES - after_left + 1
        record_event(
            conn,
            at=now,
            kind=AFTER_KIND,
            node=node,
            incident_id=after_incident,
            message=f"readings after incident {after_incident} was released ({number} of {AFTER_SAMPLES})",
            details={"readings": readings},
        )
        after_left -= 1
        if after_left == 0:
            after_incident = None
    slot = int(row.readings_slot or 0) % RING_SIZE
    conn.execute(
        delete(readings_ring).where(
            readings_ring.c.node == node, (readings_ring.c.slot == slot) | (readings_ring.c.slot >= RING_SIZE)
        )
    )
    conn.execute(
        readings_ring.insert().values(
            node=node, slot=slot, at=now, incident_id=incident_id, readings=readings
        )
    )
    conn.execute(
        update(nodes)
        .where(nodes.c.name == node)
        .values(
            readings_sampled_at=now,
            readings_slot=(slot + 1) % RING_SIZE,
            readings_after_incident=after_incident,
            readings_after_left=after_left,
        )
    )


def forget(conn: Connection, node: str) -> None:
    """Drop the node's ring (the node is forgotten)."""
    conn.execute(delete(readings_ring).where(readings_ring.c.node == node))
