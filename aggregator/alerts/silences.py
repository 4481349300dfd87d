"""Silences: mute alerts about one node, or about every node carrying some labels, for a while.

A silenced alert is still written to the outbox (so ``gpuhealth alerts`` shows what was muted) but is
never delivered. Fleet-wide alerts (the breaker) name no node and are never silenced.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, or_, select, update

from aggregator.store.tables import silences
from core.alerts_api import Silence, SilenceCreate


class SilenceNotFound(LookupError):
    """No silence has this id."""


def _active(now: datetime) -> Any:
    return (silences.c.removed_at.is_(None)) & (silences.c.starts_at <= now) & (silences.c.ends_at > now)


def create(conn: Connection, body: SilenceCreate, now: datetime, *, created_by: str) -> Silence:
    """Store a silence starting now; ``created_by`` is the authenticated caller (the body's is ignored)."""
    silence_id = conn.execute(
        silences.insert()
        .values(
            node=body.node,
            selector=dict(body.selector),
            reason=body.reason,
            created_by=created_by,
            starts_at=now,
            ends_at=body.ends_at(now),
        )
        .returning(silences.c.id)
    ).scalar_one()
    return silence_from_row(conn.execute(select(silences).where(silences.c.id == silence_id)).one(), now)


def remove(conn: Connection, silence_id: int, now: datetime) -> Silence:
    """End a silence now (idempotent)."""
    row = conn.execute(select(silences).where(silences.c.id == silence_id)).first()
    if row is None:
        raise SilenceNotFound(f"no silence {silence_id}")
    if row.removed_at is None:
        conn.execute(update(silences).where(silences.c.id == silence_id).values(removed_at=now))
    return silence_from_row(conn.execute(select(silences).where(silences.c.id == silence_id)).one(), now)


def list_silences(conn: Connection, now: datetime, *, active_only: bool = True) -> list[Silence]:
    """Silences, newest first (at most 1,000)."""
    query = select(silences).order_by(silences.c.id.desc()).limit(1000)
    if active_only:
        query = query.where(_active(now))
    return [silence_from_row(row, now) for row in conn.execute(query)]


def matching_silence(conn: Connection, node: str, labels: Mapping[str, str], now: datetime) -> int | None:
    """The id of an active silence that covers this node (by name or by its labels), or None."""
    query = select(silences.c.id, silences.c.node, silences.c.selector).where(
        _active(now), or_(silences.c.node == node, silences.c.node.is_(None))
    )
    for row in conn.execute(query.order_by(silences.c.id)):
        if row.node == node:
            return int(row.id)
        selector: dict[str, str] = row.selector or {}
        if selector and all(labels.get(key) == value for key, value in selector.items()):
            return int(row.id)
    return None


def silence_from_row(row: Any, now: datetime) -> Silence:
    """The API model of a ``silences`` row."""
    return Silence(
        id=row.id,
        node=row.node,
        selector=row.selector or {},
        reason=row.reason,
        created_by=row.created_by,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        removed_at=row.removed_at,
        active=row.removed_at is None and row.starts_at <= now < row.ends_at,
    )
