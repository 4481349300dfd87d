"""The fleet circuit breaker.

It trips when at least ``breaker_threshold_percent`` of the GPU nodes turned unhealthy within
``breaker_window_s`` (and at least ``breaker_min_nodes`` did): so many failures at once usually share a cause
(a driver roll-out, an exporter outage) that draining will not fix. While tripped no permit is granted; only a
human resets it (``gpuhealth breaker reset``). Transitions before the last reset never count again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import Connection, distinct, func, select, update

from aggregator.alerts import raising
from aggregator.settings import AggregatorSettings
from aggregator.store.common import record_event
from aggregator.store.tables import events, fleet_control, nodes
from core.aggregator_api import BreakerStatus
from core.findings import SHARED_CAUSE_CODES

log = structlog.get_logger(__name__)

TURNED_UNHEALTHY = "turned_unhealthy"
"""Event kind written when a node's reported state becomes unhealthy or quarantined."""
SHARED_CAUSE = "shared_cause"
"""Event kind written when a node starts reporting a shared-cause finding (``SHARED_CAUSE_CODES``: the whole
InfiniBand fabric down). Several nodes at once trip the breaker: one cause, nothing to drain."""


def gpu_node_count(conn: Connection) -> int:
    """Known nodes with at least one GPU: the denominator of the budget and of the breaker."""
    count = conn.execute(select(func.count()).select_from(nodes).where(nodes.c.gpu_count > 0)).scalar_one()
    return int(count)


def _control_row(conn: Connection, *, lock: bool = False) -> object:
    query = select(fleet_control).where(fleet_control.c.id == 1)
    if lock:
        query = query.with_for_update()
    return conn.execute(query).one()


def recent_unhealthy(conn: Connection, settings: AggregatorSettings, now: datetime) -> int:
    """Distinct nodes that turned unhealthy within the window and since the last reset (only nodes still
    known: a forgotten node left the denominator, so it leaves the count too)."""
    return _recent_nodes(conn, TURNED_UNHEALTHY, settings, now)


def recent_shared_cause(conn: Connection, settings: AggregatorSettings, now: datetime) -> int:
    """Distinct nodes that started reporting a shared-cause finding within the window and since the reset."""
    return _recent_nodes(conn, SHARED_CAUSE, settings, now)


def _recent_nodes(conn: Connection, kind: str, settings: AggregatorSettings, now: datetime) -> int:
    control = conn.execute(select(fleet_control.c.reset_at).where(fleet_control.c.id == 1)).scalar_one()
    since = now - timedelta(seconds=settings.breaker_window_s)
    if control is not None and control > since:
        since = control
    query = select(func.count(distinct(events.c.node))).where(
        events.c.kind == kind, events.c.at > since, events.c.node.in_(select(nodes.c.name))
    )
    return int(conn.execute(query).scalar_one())


def evaluate(conn: Connection, settings: AggregatorSettings, now: datetime) -> bool:
    """Trip the breaker if the threshold is crossed, or if ``breaker_min_nodes`` nodes report a shared cause
    (the whole fabric down) within the window; return whether it is tripped now."""
    if conn.execute(select(fleet_control.c.breaker_tripped).where(fleet_control.c.id == 1)).scalar_one():
        return True
    reason = _threshold_crossed(conn, settings, now) or _shared_cause(conn, settings, now)
    if reason is None:
        return False
    tripped = conn.execute(
        update(fleet_control)
        .where(fleet_control.c.id == 1, fleet_control.c.breaker_tripped.is_(False))
        .values(breaker_tripped=True, tripped_at=now, tripped_reason=reason)
    ).rowcount
    if tripped:
        counts = {
            "unhealthy": recent_unhealthy(conn, settings, now),
            "shared_cause": recent_shared_cause(conn, settings, now),
        }
        record_event(conn, at=now, kind="breaker_tripped", message=reason, details=counts)
        log.warning("breaker tripped", reason=reason)
        raising.breaker_tripped(conn, reason=reason, now=now)
    return True


def _threshold_crossed(conn: Connection, settings: AggregatorSettings, now: datetime) -> str | None:
    unhealthy = recent_unhealthy(conn, settings, now)
    total = gpu_node_count(conn)
    if total == 0 or unhealthy < settings.breaker_min_nodes:
        return None
    percent = 100.0 * unhealthy / total
    # At the threshold, not only above it: 1,000 of 5,000 nodes failing together (20 %) is a shared cause.
    if percent < settings.breaker_threshold_percent:
        return None
    return (
        f"{unhealthy} of {total} GPU nodes ({percent:.0f} %) turned unhealthy within "
        f"{settings.breaker_window_s:.0f} s (threshold {settings.breaker_threshold_percent:g} %)"
    )


def _shared_cause(conn: Connection, settings: AggregatorSettings, now: datetime) -> str | None:
    reporting = recent_shared_cause(conn, settings, now)
    if reporting < settings.breaker_min_nodes:
        return None
    return (
        f"{reporting} nodes report the whole InfiniBand fabric down ({', '.join(SHARED_CAUSE_CODES)}) within "
        f"{settings.breaker_window_s:.0f} s: one shared cause (the subnet manager?), not nodes to drain"
    )


def reset(conn: Connection, *, requested_by: str, reason: str, now: datetime) -> None:
    """Close the breaker (a human's decision); earlier transitions stop counting."""
    was_tripped = conn.execute(
        select(fleet_control.c.breaker_tripped).where(fleet_control.c.id == 1)
    ).scalar_one()
    conn.execute(
        update(fleet_control)
        .where(fleet_control.c.id == 1)
        .values(breaker_tripped=False, reset_at=now, reset_by=requested_by)
    )
    message = f"breaker reset by {requested_by}" + (f": {reason}" if reason else "")
    record_event(conn, at=now, kind="breaker_reset", message=message, details={"requested_by": requested_by})
    log.warning("breaker reset", requested_by=requested_by)
    if was_tripped:
        raising.breaker_reset(conn, requested_by=requested_by, now=now)


def status(conn: Connection, settings: AggregatorSettings, now: datetime) -> BreakerStatus:
    """The breaker as the API and the CLI show it."""
    row = conn.execute(select(fleet_control).where(fleet_control.c.id == 1)).one()
    return BreakerStatus(
        state="tripped" if row.breaker_tripped else "closed",
        tripped_at=row.tripped_at if row.breaker_tripped else None,
        reason=row.tripped_reason if row.breaker_tripped else None,
        reset_at=row.reset_at,
        reset_by=row.reset_by,
        threshold_percent=settings.breaker_threshold_percent,
        window_s=settings.breaker_window_s,
        recent_unhealthy=recent_unhealthy(conn, settings, now),
        gpu_nodes=gpu_node_count(conn),
    )


def lock_fleet(conn: Connection) -> None:
    """Take the fleet_control row lock: every permit decision holds it, so decisions never interleave.

    On PostgreSQL this is ``SELECT ... FOR UPDATE`` (a second aggregator waits here); on SQLite the writer's
    ``BEGIN IMMEDIATE`` already holds the database write lock and FOR UPDATE is not rendered.
    """
    _control_row(conn, lock=True)
