"""Remediation permits: the fleet budget, per-node cooldown, TTLs.

A permit lets one node's agent take capacity away (drain, reset, reboot). Every decision runs in one write
transaction that first locks the single ``fleet_control`` row (see :func:`aggregator.breaker.lock_fleet`), so
the count of permits in use cannot change between reading it and granting: two aggregators on one PostgreSQL
never grant past the budget. Decisions are rare (a few a minute), so serialising them costs nothing.
Every grant and every refusal is written to the history with its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import Connection, and_, func, select, update

from aggregator import breaker, incident_ids
from aggregator.alerts import raising
from aggregator.settings import AggregatorSettings
from aggregator.store.common import record_event
from aggregator.store.tables import events, nodes, permits
from core.aggregator_api import BAD_STATES, BudgetStatus, Permit, PermitRefusal, PermitRequest
from core.findings import SHARED_CAUSE_CODES
from core.health import NodeState
from remediation.plan.profiles import PROFILE_LABEL, budget_share

log = structlog.get_logger(__name__)


class PermitNotFound(LookupError):
    """No permit has this id."""


class PermitNotActive(RuntimeError):
    """The permit was released or has expired; the agent must ask for a new one."""


@dataclass(frozen=True)
class Decision:
    """A grant (``permit``) or a refusal (``refusal``), never both."""

    permit: Permit | None = None
    refusal: PermitRefusal | None = None


def budget_limit(settings: AggregatorSettings, gpu_nodes: int) -> int:
    """Nodes that may hold a permit at once: the smaller of count and percent, never below the floor."""
    by_percent = math.floor(gpu_nodes * settings.budget_max_percent / 100.0)
    return max(settings.budget_min_nodes, min(settings.budget_max_nodes, by_percent))


def active_clause(now: datetime) -> Any:
    """SQL condition: the permit is neither released nor expired at ``now``."""
    return and_(permits.c.released_at.is_(None), permits.c.expires_at > now)


def permits_in_use(conn: Connection, now: datetime) -> int:
    """How many permits are active at ``now``."""
    return int(conn.execute(select(func.count()).select_from(permits).where(active_clause(now))).scalar_one())


def budget_status(conn: Connection, settings: AggregatorSettings, now: datetime) -> BudgetStatus:
    """The budget's limit for the current fleet size and its use."""
    return BudgetStatus(
        limit=budget_limit(settings, breaker.gpu_node_count(conn)),
        in_use=permits_in_use(conn, now),
        max_nodes=settings.budget_max_nodes,
        max_percent=settings.budget_max_percent,
    )


def permit_from_row(row: Any, now: datetime) -> Permit:
    """The API model of a ``permits`` row."""
    return Permit(
        id=row.id,
        node=row.node,
        action=row.action,
        incident_id=row.incident_id,
        granted_at=row.granted_at,
        expires_at=row.expires_at,
        released_at=row.released_at,
        active=row.released_at is None and row.expires_at > now,
    )


def request_permit(
    conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime
) -> Decision:
    """Grant or refuse, in the caller's write transaction. Asking again while holding a permit returns it."""
    breaker.lock_fleet(conn)
    # An incident id must be the node's own: another node's is dropped, never written to (events, permit).
    incident_id, owner = incident_ids.resolve(conn, request.node, request.incident_id)
    if owner is incident_ids.Owner.FOREIGN:
        log.warning("permit request names another node's incident", node=request.node)
    request = request.model_copy(update={"incident_id": incident_id})
    refusal = _refusal(conn, request, settings, now)
    if refusal is not None:
        record_event(
            conn,
            at=now,
            kind="permit_refused",
            node=_known_node(conn, request.node),
            incident_id=request.incident_id,
            message=f"permit for {request.action.value} refused: {refusal.reason}",
            details={"code": refusal.code, "action": request.action.value},
            repeatable=True,  # asked again every pass while the breaker is tripped: one row with a count
        )
        log.info("permit refused", node=request.node, code=refusal.code)
        _alert_if_refused_too_long(conn, request.node, refusal.code, settings, now)
        return Decision(refusal=refusal)
    held = conn.execute(select(permits).where(permits.c.node == request.node, active_clause(now))).first()
    if held is not None:
        return Decision(permit=permit_from_row(held, now))
    return Decision(permit=_grant(conn, request, settings, now))


def _alert_if_refused_too_long(
    conn: Connection, node: str, code: str, settings: AggregatorSettings, now: datetime
) -> None:
    """Alert once per streak of refusals (since the node's last grant) that has lasted past the threshold."""
    last_grant = conn.execute(
        select(func.max(events.c.id)).where(events.c.node == node, events.c.kind == "permit_granted")
    ).scalar_one()
    first = conn.execute(
        select(events.c.id, events.c.at)
        .where(events.c.node == node, events.c.kind == "permit_refused", events.c.id > (last_grant or 0))
        .order_by(events.c.id)
        .limit(1)
    ).first()
    if first is None or (now - first.at).total_seconds() < settings.alert_permit_refused_after_s:
        return
    raising.permit_refused_long(
        conn, node=node, code=code, refused_since=first.at, streak=int(first.id), now=now
    )


def _known_node(conn: Connection, name: str) -> str | None:
    """The node name for an event row, or None when the node is unknown (no orphan history)."""
    return conn.execute(select(nodes.c.name).where(nodes.c.name == name)).scalar_one_or_none()


def _refusal(
    conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime
) -> PermitRefusal | None:
    """The first rule that forbids this grant, or None (also when the node already holds a permit)."""
    node = conn.execute(select(nodes.c.stale_at).where(nodes.c.name == request.node)).first()
    if node is None:
        return PermitRefusal(code="unknown_node", reason=f"node {request.node} has never reported")
    if node.stale_at <= now:
        return PermitRefusal(code="stale_node", reason=f"node {request.node} stopped reporting")
    if conn.execute(select(permits.c.id).where(permits.c.node == request.node, active_clause(now))).first():
        return None  # already holds one: the caller returns it
    return _fleet_refusal(conn, request, settings, now)


def _fleet_refusal(
    conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime
) -> PermitRefusal | None:
    if breaker.evaluate(conn, settings, now):
        return PermitRefusal(code="breaker_tripped", reason="the fleet circuit breaker is tripped")
    shared = _shared_cause(conn, request.node, settings, now)
    if shared is not None:
        return PermitRefusal(code="shared_cause", reason=shared)
    settling = _settling_for(conn, request, settings, now)
    if settling is not None:
        return PermitRefusal(
            code="settling",
            # The same words at every retry, so the timeline keeps one row with a count (the seconds left
            # are in retry_after_s).
            reason=(
                f"a first permit waits {settings.permit_settle_s:g} s after the node turned unhealthy, so "
                "that a burst trips the breaker before capacity is taken"
            ),
            retry_after_s=round(settling, 3),
        )
    cooldown = _cooldown_until(conn, request, settings, now)
    if cooldown is not None:
        return PermitRefusal(code="cooldown", reason=f"node in cooldown until {cooldown.isoformat()}")
    limit = budget_limit(settings, breaker.gpu_node_count(conn))
    in_use = permits_in_use(conn, now)
    if in_use >= limit:
        return PermitRefusal(
            code="budget_exhausted", reason=f"budget exhausted: {in_use} of {limit} permits in use"
        )
    return _group_refusal(conn, request.node, settings, limit, now)


def _profile_of(labels: object) -> str | None:
    value = labels.get(PROFILE_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def _group_refusal(
    conn: Connection, node: str, settings: AggregatorSettings, limit: int, now: datetime
) -> PermitRefusal | None:
    """The node's profile may hold at most its ``budget_share_percent`` of the fleet's permits (at least
    one): a canary group cannot take the whole budget from the rest of the fleet."""
    labels = conn.execute(select(nodes.c.labels).where(nodes.c.name == node)).scalar_one_or_none()
    profile = _profile_of(labels)
    share = budget_share(settings.profiles, profile)
    if profile is None or share is None:
        return None
    group_limit = max(1, math.floor(limit * share / 100.0))
    held = conn.execute(
        select(nodes.c.labels).join(permits, permits.c.node == nodes.c.name).where(active_clause(now))
    ).scalars()
    in_group = sum(1 for row in held if _profile_of(row) == profile)
    if in_group < group_limit:
        return None
    return PermitRefusal(
        code="budget_exhausted",
        reason=f"profile {profile}'s share exhausted: {in_group} of {group_limit} permits "
        f"({share:g} % of {limit})",
    )


def _shared_cause(conn: Connection, node: str, settings: AggregatorSettings, now: datetime) -> str | None:
    """Why not to act on this node alone: it reports a shared cause (the whole fabric down) that other nodes
    report too within the breaker's window. One node's outage may be its own; several are one cause."""
    findings = conn.execute(select(nodes.c.findings).where(nodes.c.name == node)).scalar_one_or_none() or []
    codes = {f.get("code") for f in findings if isinstance(f, dict) and f.get("status") != "ok"}
    shared = sorted(code for code in codes if code in SHARED_CAUSE_CODES)
    if not shared or breaker.recent_shared_cause(conn, settings, now) < 2:
        return None
    return f"{', '.join(shared)} is reported by other nodes too: a shared cause, not this node's to drain"


def _settling_for(
    conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime
) -> float | None:
    """Seconds the node must still wait before its first permit of this episode, or None.

    A burst reaches the aggregator one report at a time: without a wait, the first nodes of a burst would be
    granted permits (and drained) before enough of the others reported to trip the breaker. The wait counts
    from the node's latest turn to unhealthy; an escalation within an incident that already held a permit
    does not wait again."""
    if settings.permit_settle_s <= 0:
        return None
    if (
        request.incident_id is not None
        and conn.execute(
            select(permits.c.id).where(
                permits.c.node == request.node, permits.c.incident_id == request.incident_id
            )
        ).first()
    ):
        return None
    state = conn.execute(select(nodes.c.state).where(nodes.c.name == request.node)).scalar_one()
    if NodeState(state) not in BAD_STATES:
        # The agent asks in the pass that found the fault, before the report saying so may have arrived:
        # an incident's permit waits the whole time from here; a healthy node's (maintenance) never waits.
        return settings.permit_settle_s if request.incident_id is not None else None
    turned = conn.execute(
        select(func.max(events.c.at)).where(
            events.c.node == request.node, events.c.kind == breaker.TURNED_UNHEALTHY
        )
    ).scalar_one()
    if turned is None:
        return None
    elapsed = (now - turned).total_seconds()
    if elapsed < 0:
        # The aggregator's clock went back past the turn (a clock step): counting from it would refuse the
        # node's permit for as long as the step (an hour). The node did report itself unhealthy; the budget
        # still bounds what is taken, so the wait ends here.
        return None
    left = settings.permit_settle_s - elapsed
    return left if left > 0 else None


def _cooldown_until(
    conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime
) -> datetime | None:
    """End of the node's cooldown after its last permit; an escalation within one incident is exempt."""
    last = conn.execute(
        select(permits).where(permits.c.node == request.node).order_by(permits.c.granted_at.desc()).limit(1)
    ).first()
    if last is None or (request.incident_id is not None and last.incident_id == request.incident_id):
        return None
    ended = last.released_at if last.released_at is not None else last.expires_at
    until: datetime = ended + timedelta(seconds=settings.cooldown_s)
    return until if until > now else None


def _grant(conn: Connection, request: PermitRequest, settings: AggregatorSettings, now: datetime) -> Permit:
    ttl = min(request.ttl_s or settings.permit_ttl_s, settings.max_permit_ttl_s)
    permit_id = conn.execute(
        permits.insert()
        .values(
            node=request.node,
            action=request.action.value,
            incident_id=request.incident_id,
            granted_at=now,
            expires_at=now + timedelta(seconds=ttl),
        )
        .returning(permits.c.id)
    ).scalar_one()
    in_use = permits_in_use(conn, now)
    record_event(
        conn,
        at=now,
        kind="permit_granted",
        node=request.node,
        incident_id=request.incident_id,
        message=f"permit {permit_id} for {request.action.value} granted ({in_use} in use), ttl {ttl:.0f} s",
        details={"permit": permit_id, "action": request.action.value, "in_use": in_use},
    )
    log.info("permit granted", node=request.node, permit=permit_id)
    row = conn.execute(select(permits).where(permits.c.id == permit_id)).one()
    return permit_from_row(row, now)


def node_of(conn: Connection, permit_id: int) -> str | None:
    """The node a permit was granted to, or None when there is no such permit."""
    node: str | None = conn.execute(
        select(permits.c.node).where(permits.c.id == permit_id)
    ).scalar_one_or_none()
    return node


def renew_permit(
    conn: Connection, permit_id: int, ttl_s: float | None, settings: AggregatorSettings, now: datetime
) -> Permit:
    """Push an active permit's expiry out; a lapsed or released one cannot be revived."""
    row = conn.execute(select(permits).where(permits.c.id == permit_id).with_for_update()).first()
    if row is None:
        raise PermitNotFound(f"no permit {permit_id}")
    if row.released_at is not None or row.expires_at <= now:
        raise PermitNotActive(f"permit {permit_id} is no longer active; request a new one")
    ttl = min(ttl_s or settings.permit_ttl_s, settings.max_permit_ttl_s)
    conn.execute(
        update(permits).where(permits.c.id == permit_id).values(expires_at=now + timedelta(seconds=ttl))
    )
    return permit_from_row(conn.execute(select(permits).where(permits.c.id == permit_id)).one(), now)


def release_permit(conn: Connection, permit_id: int, now: datetime) -> Permit:
    """End a permit (idempotent: releasing a released or lapsed permit changes nothing)."""
    row = conn.execute(select(permits).where(permits.c.id == permit_id).with_for_update()).first()
    if row is None:
        raise PermitNotFound(f"no permit {permit_id}")
    if row.released_at is None and row.expires_at > now:
        conn.execute(update(permits).where(permits.c.id == permit_id).values(released_at=now))
        record_event(
            conn,
            at=now,
            kind="permit_released",
            node=row.node,
            incident_id=row.incident_id,
            message=f"permit {permit_id} released",
            details={"permit": permit_id},
        )
    return permit_from_row(conn.execute(select(permits).where(permits.c.id == permit_id)).one(), now)


def active_permit(conn: Connection, node: str, now: datetime) -> Permit | None:
    """The node's active permit, if it holds one."""
    row = conn.execute(select(permits).where(permits.c.node == node, active_clause(now))).first()
    return permit_from_row(row, now) if row is not None else None


def list_permits(conn: Connection, now: datetime, *, active_only: bool = True) -> list[Permit]:
    """Permits, newest first (at most 1,000); only the active ones unless ``active_only`` is False."""
    query = select(permits).order_by(permits.c.id.desc()).limit(1000)
    if active_only:
        query = query.where(active_clause(now))
    return [permit_from_row(row, now) for row in conn.execute(query)]
