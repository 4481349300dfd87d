"""The durable outbox: routing alerts to sinks, picking what is due, recording each attempt.

``alerts`` rows are written by :mod:`aggregator.alerts.raising` in the transaction of the change they report.
Routing turns each into one ``alert_deliveries`` row per sink. A delivery is sent only when every earlier
delivery of the same group (incident, node or breaker) to the same sink has been delivered or dead-lettered,
so one incident's opened / escalated / resolved arrive in that order. A worker claims a delivery with a lease
(a conditional UPDATE) so two aggregators on one database do not send it twice at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, exists, or_, select, update
from sqlalchemy.sql.expression import false

from aggregator.alert_settings import SEVERITY_ORDER, RouteSettings
from aggregator.alerts import raising
from aggregator.settings import AggregatorSettings
from aggregator.store.common import insert_ignoring_conflict
from aggregator.store.tables import alert_deliveries, alerts, nodes
from core.alerts_api import Alert, AlertView, Delivery

ROUTE_BATCH = 500
MAX_LISTED = 1000


class DeliveryNotFound(LookupError):
    """No delivery has this id."""


class AlreadyDelivered(ValueError):
    """A retry of a delivery that was delivered, without ``force``: the receiver has it already."""


def sinks_for(alert: Alert, settings: AggregatorSettings) -> list[str]:
    """The sinks whose routes match ``alert`` (every sink when no route is configured)."""
    if not settings.alert_routes:
        return [sink.name for sink in settings.alert_sinks]
    chosen: list[str] = []
    for route in settings.alert_routes:
        if _matches(route, alert):
            chosen.extend(name for name in route.sinks if name not in chosen)
    return chosen


def _matches(route: RouteSettings, alert: Alert) -> bool:
    if SEVERITY_ORDER[alert.severity] < SEVERITY_ORDER[route.min_severity]:
        return False
    if route.kinds and alert.kind not in route.kinds:
        return False
    return all(alert.labels.get(key) == value for key, value in route.labels.items())


def route_pending(conn: Connection, settings: AggregatorSettings, now: datetime) -> int:
    """Create the deliveries of alerts not yet routed; returns how many alerts were routed."""
    rows = conn.execute(
        select(alerts).where(alerts.c.routed == false()).order_by(alerts.c.id).limit(ROUTE_BATCH)
    ).all()
    for row in rows:
        alert = alert_from_row(row)
        if alert.silence_id is None:
            for sink in sinks_for(alert, settings):
                insert_ignoring_conflict(
                    conn,
                    alert_deliveries,
                    {
                        "alert_id": alert.id,
                        "sink": sink,
                        "group_key": alert.group_key,
                        "status": "pending",
                        "attempts": 0,
                        "next_attempt_at": now,
                    },
                )
        conn.execute(update(alerts).where(alerts.c.id == alert.id).values(routed=True))
    return len(rows)


def raise_stale(conn: Connection, since: datetime, now: datetime) -> int:
    """Raise ``node_stale`` for nodes whose ``stale_at`` passed in (since, now]; returns how many."""
    rows = conn.execute(
        select(nodes.c.name, nodes.c.stale_at).where(nodes.c.stale_at > since, nodes.c.stale_at <= now)
    ).all()
    for row in rows:
        raising.node_stale(conn, node=row.name, stale_at=row.stale_at, now=now)
    return len(rows)


@dataclass(frozen=True)
class Due:
    """A claimed delivery and its alert."""

    delivery_id: int
    attempts: int
    alert: Alert


def claim_due(conn: Connection, sink: str, now: datetime, *, limit: int, lease_s: float) -> list[Due]:
    """Claim up to ``limit`` due deliveries to ``sink``, at most one per group (the group's oldest)."""
    earlier = alert_deliveries.alias("earlier")
    blocked = exists().where(
        earlier.c.sink == alert_deliveries.c.sink,
        earlier.c.group_key == alert_deliveries.c.group_key,
        earlier.c.status == "pending",
        # By alert id: one incident's alerts are raised under its node's row lock, so they commit in id
        # order, while deliveries routed by two replicas at once may get ids out of that order.
        earlier.c.alert_id < alert_deliveries.c.alert_id,
    )
    query = (
        select(
            alert_deliveries.c.id.label("delivery_id"),
            alert_deliveries.c.attempts.label("delivery_attempts"),
            alerts,
        )
        .join(alerts, alerts.c.id == alert_deliveries.c.alert_id)
        .where(
            alert_deliveries.c.sink == sink,
            alert_deliveries.c.status == "pending",
            alert_deliveries.c.next_attempt_at <= now,
            _unclaimed(now),
            ~blocked,
        )
        .order_by(alert_deliveries.c.alert_id)
        .limit(limit)
    )
    claimed: list[Due] = []
    for row in conn.execute(query).all():
        taken = conn.execute(
            update(alert_deliveries)
            .where(alert_deliveries.c.id == row.delivery_id, _unclaimed(now))
            .values(claimed_until=now + timedelta(seconds=lease_s))
        ).rowcount
        if taken:
            due = Due(delivery_id=row.delivery_id, attempts=row.delivery_attempts, alert=alert_from_row(row))
            claimed.append(due)
    return claimed


def _unclaimed(now: datetime) -> Any:
    return or_(alert_deliveries.c.claimed_until.is_(None), alert_deliveries.c.claimed_until <= now)


def mark_delivered(conn: Connection, delivery_id: int, now: datetime) -> None:
    """The sink accepted it."""
    conn.execute(
        update(alert_deliveries)
        .where(alert_deliveries.c.id == delivery_id)
        .values(
            status="delivered", delivered_at=now, claimed_until=None, attempts=alert_deliveries.c.attempts + 1
        )
    )


def mark_failed(conn: Connection, delivery_id: int, *, error: str, retry_at: datetime | None) -> None:
    """An attempt failed: try again at ``retry_at``, or dead-letter it when that is None."""
    values: dict[str, Any] = {
        "attempts": alert_deliveries.c.attempts + 1,
        "last_error": error[:500],
        "claimed_until": None,
    }
    if retry_at is None:
        values["status"] = "dead"
    else:
        values["next_attempt_at"] = retry_at
    conn.execute(update(alert_deliveries).where(alert_deliveries.c.id == delivery_id).values(**values))


def retry(conn: Connection, delivery_id: int, now: datetime, *, force: bool = False) -> Delivery:
    """A human asks to send a dead-lettered (or pending) delivery again now, with a fresh attempt count; a
    delivered one only with ``force`` (else :class:`AlreadyDelivered`), since its receiver has it already."""
    row = conn.execute(select(alert_deliveries).where(alert_deliveries.c.id == delivery_id)).first()
    if row is None:
        raise DeliveryNotFound(f"no alert delivery {delivery_id}")
    if row.status == "delivered" and not force:
        when = f" at {row.delivered_at:%Y-%m-%d %H:%M:%S}Z" if row.delivered_at else ""
        raise AlreadyDelivered(f"delivery {delivery_id} to {row.sink} was delivered{when}")
    if row.status != "delivered" or force:
        conn.execute(
            update(alert_deliveries)
            .where(alert_deliveries.c.id == delivery_id)
            .values(status="pending", attempts=0, next_attempt_at=now, claimed_until=None)
        )
    return delivery_from_row(
        conn.execute(select(alert_deliveries).where(alert_deliveries.c.id == delivery_id)).one()
    )


def list_alerts(conn: Connection, *, failed_only: bool = False, limit: int = 100) -> list[AlertView]:
    """Alerts newest first with their deliveries; ``failed_only``: those with a dead-lettered delivery."""
    query = select(alerts).order_by(alerts.c.id.desc()).limit(min(limit, MAX_LISTED))
    if failed_only:
        query = query.where(
            exists().where(
                and_(alert_deliveries.c.alert_id == alerts.c.id, alert_deliveries.c.status == "dead")
            )
        )
    rows = conn.execute(query).all()
    ids = [row.id for row in rows]
    by_alert: dict[int, list[Delivery]] = {alert_id: [] for alert_id in ids}
    if ids:
        deliveries = conn.execute(
            select(alert_deliveries)
            .where(alert_deliveries.c.alert_id.in_(ids))
            .order_by(alert_deliveries.c.id)
        )
        for delivery in deliveries:
            by_alert[delivery.alert_id].append(delivery_from_row(delivery))
    return [AlertView(**alert_from_row(row).model_dump(), deliveries=by_alert[row.id]) for row in rows]


def alert_from_row(row: Any) -> Alert:
    """The API model of an ``alerts`` row."""
    return Alert(
        id=row.id,
        key=row.key,
        kind=row.kind,
        status=row.status,
        severity=row.severity,
        group_key=row.group_key,
        node=row.node,
        incident_id=row.incident_id,
        summary=row.summary,
        details=row.details or {},
        labels=row.labels or {},
        created_at=row.created_at,
        silence_id=row.silence_id,
    )


def delivery_from_row(row: Any) -> Delivery:
    """The API model of an ``alert_deliveries`` row."""
    return Delivery(
        id=row.id,
        alert_id=row.alert_id,
        sink=row.sink,
        status=row.status,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
    )
