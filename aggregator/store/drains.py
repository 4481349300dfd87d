"""Central drains in the store: one row per permit whose node the remediator drains.

An agent orders the drain of its own node under the permit it holds (``order``); the remediator claims the
orders (``claim``), runs them with the central credentials, and writes their progress back (``progress``),
which the agent reads (``get``) to advance its plan. A claim is a lease: the remediator that runs a drain
renews it while it runs; another one (or the same one after a restart, by its stable name) takes over a
drain whose lease lapsed, so a drain survives an aggregator restart and, on PostgreSQL with several
aggregators, runs in exactly one of them at a time.

A drain is only ever claimed while its permit is active and names the same node and incident: the
remediator acts on nothing the aggregator did not grant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update

from aggregator.store.tables import drains, permits
from core.aggregator_api import OPEN_DRAIN_PHASES, CentralDrain, DrainNewsItem

MAX_NEWS = 50  # a drain reports a handful of lines (started, outcome, requeue): more is a bug, not history


class DrainOrderRefused(RuntimeError):
    """The permit cannot be drained under (released, expired, or held for another action)."""


@dataclass(frozen=True)
class Claimed:
    """A drain this remediator now runs: which permit, node, incident and deadline, and whether it resumes
    one that was already running (a restart, or another remediator's lapsed lease)."""

    permit_id: int
    node: str
    incident_id: str | None
    deadline_s: float
    resumed: bool


def order(conn: Connection, permit_id: int, deadline_s: float, now: datetime) -> CentralDrain:
    """Record the order to drain the node of ``permit_id`` (idempotent while the permit is active: a second
    order returns the first).

    Raises DrainOrderRefused when the permit is not active; the caller checked that it exists and whose it is.
    """
    permit = conn.execute(select(permits).where(permits.c.id == permit_id)).one()
    if permit.released_at is not None or permit.expires_at <= now:
        raise DrainOrderRefused(f"permit {permit_id} is no longer active: ask for a new one")
    existing = get(conn, permit_id)
    if existing is not None:
        return existing
    conn.execute(
        drains.insert().values(
            permit_id=permit_id,
            node=permit.node,
            incident_id=permit.incident_id,
            deadline_s=deadline_s,
            phase="requested",
            detail="waiting for the remediator",
            news=[],
            owner=None,
            lease_until=None,
            requested_at=now,
            updated_at=now,
        )
    )
    found = get(conn, permit_id)
    assert found is not None
    return found


def get(conn: Connection, permit_id: int) -> CentralDrain | None:
    """The drain ordered under ``permit_id``, or None."""
    row = conn.execute(select(drains).where(drains.c.permit_id == permit_id)).first()
    return _model(row) if row is not None else None


def latest_of(conn: Connection, node: str) -> CentralDrain | None:
    """The node's most recent drain order, or None."""
    row = conn.execute(
        select(drains).where(drains.c.node == node).order_by(drains.c.requested_at.desc()).limit(1)
    ).first()
    return _model(row) if row is not None else None


def _unfinished() -> Any:
    """A drain not finished: ordered, running, or ended with its requeue not ended yet (the phase says the
    drain's outcome as soon as it is known; ``finished_at`` is written once the requeue after it ended too).
    A remediator that died between the two left such a drain: it is taken again, so its requeue finishes."""
    return or_(drains.c.phase.in_(OPEN_DRAIN_PHASES), drains.c.finished_at.is_(None))


def any_open(conn: Connection, now: datetime) -> bool:
    """Whether a drain waits for a remediator or runs, or (under an active permit) has its requeue to end."""
    active = select(permits.c.id).where(permits.c.released_at.is_(None), permits.c.expires_at > now)
    waiting = or_(
        drains.c.phase.in_(OPEN_DRAIN_PHASES),
        and_(drains.c.finished_at.is_(None), drains.c.permit_id.in_(active)),
    )
    return conn.execute(select(drains.c.permit_id).where(waiting).limit(1)).first() is not None


def claim(conn: Connection, owner: str, lease_s: float, now: datetime, *, limit: int) -> list[Claimed]:
    """Take up to ``limit`` unfinished drains that no other remediator holds (never held, held by ``owner``
    before a restart, or whose lease lapsed), each only while its permit is active for its node and
    incident. Open drains whose permit is gone before they ran fail here, and are never started."""
    _fail_orphans(conn, now)
    free = or_(drains.c.owner.is_(None), drains.c.owner == owner, drains.c.lease_until <= now)
    rows = conn.execute(
        select(drains)
        .join(permits, permits.c.id == drains.c.permit_id)
        .where(_unfinished(), free, _permit_matches(now))
        .order_by(drains.c.requested_at)
        .limit(limit)
    ).all()
    until = now + timedelta(seconds=lease_s)
    taken: list[Claimed] = []
    for row in rows:
        won = conn.execute(
            update(drains)
            .where(drains.c.permit_id == row.permit_id, _unfinished(), free)
            .values(owner=owner, lease_until=until, updated_at=now)
        ).rowcount
        if won == 1:  # another remediator may have taken it between the read and the update
            resumed = row.phase != "requested"
            taken.append(Claimed(row.permit_id, row.node, row.incident_id, row.deadline_s, resumed))
    return taken


def renew(conn: Connection, owner: str, permit_ids: list[int], lease_s: float, now: datetime) -> None:
    """Extend the leases ``owner`` holds on these drains."""
    if permit_ids:
        conn.execute(
            update(drains)
            .where(drains.c.permit_id.in_(permit_ids), drains.c.owner == owner)
            .values(lease_until=now + timedelta(seconds=lease_s))
        )


def progress(
    conn: Connection,
    permit_id: int,
    owner: str,
    now: datetime,
    *,
    phase: str | None = None,
    detail: str | None = None,
    news: Sequence[tuple[bool, str, bool]] = (),
    finished: bool = False,
) -> bool:
    """Write a drain's new phase, detail and news lines (ok, detail, requeue), and with ``finished`` that
    the drain and its requeue both ended; False when ``owner`` no longer holds it (another remediator took
    it over: this one must stop reporting)."""
    row = conn.execute(
        select(drains.c.news, drains.c.owner).where(drains.c.permit_id == permit_id).with_for_update()
    ).first()
    if row is None or row.owner != owner:
        return False
    lines = list(row.news or [])
    for ok, text, requeue in news:
        lines.append({"seq": len(lines) + 1, "ok": ok, "detail": text, "requeue": requeue})
    values: dict[str, Any] = {"news": lines[-MAX_NEWS:], "updated_at": now}
    if phase is not None:
        values["phase"] = phase
    if detail is not None:
        values["detail"] = detail
    if finished:
        values["finished_at"] = now
    conn.execute(update(drains).where(drains.c.permit_id == permit_id).values(**values))
    return True


def _permit_matches(now: datetime) -> Any:
    return and_(
        permits.c.node == drains.c.node,
        or_(permits.c.incident_id == drains.c.incident_id, permits.c.incident_id.is_(None)),
        permits.c.released_at.is_(None),
        permits.c.expires_at > now,
    )


def _fail_orphans(conn: Connection, now: datetime) -> None:
    """A requested drain whose permit was released or lapsed before any remediator ran it never runs."""
    active = select(permits.c.id).where(permits.c.released_at.is_(None), permits.c.expires_at > now)
    conn.execute(
        update(drains)
        .where(drains.c.phase == "requested", drains.c.permit_id.not_in(active))
        .values(
            phase="failed",
            detail="not drained: the permit is no longer active",
            updated_at=now,
            finished_at=now,
        )
    )


def _model(row: Any) -> CentralDrain:
    return CentralDrain(
        permit_id=row.permit_id,
        node=row.node,
        incident_id=row.incident_id,
        phase=row.phase,
        detail=row.detail,
        requested_at=row.requested_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        news=[DrainNewsItem.model_validate(item) for item in row.news or []],
    )
