"""Raising alerts: one row in the ``alerts`` outbox, written in the caller's transaction.

Every place that changes fleet state (an incident opens, escalates or closes, the breaker trips or is reset,
a node is held as a repeat offender, permits keep being refused, a node goes stale) calls one function here
inside the same write transaction as the change. The change and its alert therefore commit together or not
at all: an alert is never lost, and none is raised for a change that was rolled back. Each alert has an
idempotency key naming its cause, and the key is unique in the table, so a cause raises at most one alert
even when two aggregators see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Connection, select

from aggregator.alerts.silences import matching_silence
from aggregator.store.common import insert_ignoring_conflict
from aggregator.store.tables import alerts, nodes

log = structlog.get_logger(__name__)

FLEET_GROUP = "fleet:breaker"
_CRITICAL_ACTIONS = frozenset({"reset_gpu", "drain_and_reset", "reboot", "replace"})


def severity_of(action: str) -> str:
    """Alert severity for a remediation action: taking capacity away pages, an app fault warns."""
    if action in _CRITICAL_ACTIONS:
        return "critical"
    return "warning" if action == "restart_app" else "info"


@dataclass(frozen=True)
class AlertSpec:
    """What an alert says; ``key`` names its cause, ``group_key`` the stream it is ordered in."""

    key: str
    kind: str
    severity: str
    group_key: str
    summary: str
    status: str = "firing"
    node: str | None = None
    incident_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def raise_alert(
    conn: Connection, spec: AlertSpec, now: datetime, *, labels: Mapping[str, str] | None = None
) -> None:
    """Write the alert to the outbox (a repeat of an existing key is ignored); silenced alerts are marked."""
    if spec.node is not None and labels is None:
        labels = conn.execute(select(nodes.c.labels).where(nodes.c.name == spec.node)).scalar_one_or_none()
    node_labels = dict(labels or {})
    silence = matching_silence(conn, spec.node, node_labels, now) if spec.node is not None else None
    insert_ignoring_conflict(
        conn,
        alerts,
        {
            "key": spec.key,
            "kind": spec.kind,
            "status": spec.status,
            "severity": spec.severity,
            "group_key": spec.group_key,
            "node": spec.node,
            "incident_id": spec.incident_id,
            "summary": spec.summary,
            "details": spec.details,
            "labels": node_labels,
            "created_at": now,
            "silence_id": silence,
            "routed": False,
        },
    )
    log.info("alert raised", kind=spec.kind, node=spec.node, silenced=silence is not None)


def _incident_group(incident_id: str) -> str:
    return f"incident:{incident_id}"


def incident_opened(
    conn: Connection,
    *,
    node: str,
    incident_id: str,
    action: str,
    reasons: list[str],
    gpus: list[str],
    labels: Mapping[str, str],
    now: datetime,
) -> None:
    """An agent reported a new incident."""
    spec = AlertSpec(
        key=f"incident_opened:{incident_id}",
        kind="incident_opened",
        severity=severity_of(action),
        group_key=_incident_group(incident_id),
        summary=f"{node}: GPU incident {', '.join(reasons) or 'no reason given'}; action {action}",
        node=node,
        incident_id=incident_id,
        details={"action": action, "reasons": reasons, "gpus": gpus},
    )
    raise_alert(conn, spec, now, labels=labels)


def incident_escalated(
    conn: Connection,
    *,
    node: str,
    incident_id: str,
    previous_action: str,
    action: str,
    reasons: list[str],
    gpus: list[str],
    labels: Mapping[str, str],
    now: datetime,
) -> None:
    """The incident's action became more severe (e.g. reset_gpu -> reboot)."""
    spec = AlertSpec(
        key=f"incident_escalated:{incident_id}:{action}",
        kind="incident_escalated",
        severity=severity_of(action),
        group_key=_incident_group(incident_id),
        summary=f"{node}: incident escalated from {previous_action} to {action} ({', '.join(reasons)})",
        node=node,
        incident_id=incident_id,
        details={"action": action, "previous_action": previous_action, "reasons": reasons, "gpus": gpus},
    )
    raise_alert(conn, spec, now, labels=labels)


def incident_resolved(conn: Connection, *, node: str, incident_id: str, action: str, now: datetime) -> None:
    """The agent closed the incident. Same severity as the incident, so it reaches the sinks that paged."""
    spec = AlertSpec(
        key=f"incident_resolved:{incident_id}",
        kind="incident_resolved",
        status="resolved",
        severity=severity_of(action),
        group_key=_incident_group(incident_id),
        summary=f"{node}: incident {incident_id} resolved",
        node=node,
        incident_id=incident_id,
        details={"action": action},
    )
    raise_alert(conn, spec, now)


def node_stale(conn: Connection, *, node: str, stale_at: datetime, now: datetime) -> None:
    """A node stopped reporting (one alert per silent spell: the key carries when it went stale)."""
    spec = AlertSpec(
        key=f"node_stale:{node}:{stale_at.isoformat()}",
        kind="node_stale",
        severity="warning",
        group_key=f"node:{node}",
        summary=f"{node}: stopped reporting (stale since {stale_at:%Y-%m-%d %H:%M:%S}Z)",
        node=node,
        details={"stale_at": stale_at.isoformat()},
    )
    raise_alert(conn, spec, now)


def breaker_tripped(conn: Connection, *, reason: str, now: datetime) -> None:
    """The fleet circuit breaker tripped: no permit will be granted until a human resets it."""
    spec = AlertSpec(
        key=f"breaker_tripped:{now.isoformat()}",
        kind="breaker_tripped",
        severity="critical",
        group_key=FLEET_GROUP,
        summary=f"fleet circuit breaker tripped: {reason}",
        details={"reason": reason},
    )
    raise_alert(conn, spec, now)


def breaker_reset(conn: Connection, *, requested_by: str, now: datetime) -> None:
    """A human reset the breaker (resolves the tripped alert)."""
    spec = AlertSpec(
        key=f"breaker_reset:{now.isoformat()}",
        kind="breaker_reset",
        status="resolved",
        severity="critical",
        group_key=FLEET_GROUP,
        summary=f"fleet circuit breaker reset by {requested_by}",
        details={"requested_by": requested_by},
    )
    raise_alert(conn, spec, now)


def permit_refused_long(
    conn: Connection, *, node: str, code: str, refused_since: datetime, streak: int, now: datetime
) -> None:
    """Every permit the node asked for since ``refused_since`` was refused: it cannot be remediated."""
    spec = AlertSpec(
        key=f"permit_refused:{node}:{streak}",
        kind="permit_refused",
        severity="warning",
        group_key=f"node:{node}",
        summary=f"{node}: permits refused since {refused_since:%Y-%m-%d %H:%M:%S}Z (last: {code})",
        node=node,
        details={"code": code, "refused_since": refused_since.isoformat()},
    )
    raise_alert(conn, spec, now)


def repeat_offender(conn: Connection, *, node: str, incidents: int, reason: str, now: datetime) -> None:
    """The node was held with action replace after too many incidents."""
    spec = AlertSpec(
        key=f"repeat_offender:{node}:{now.isoformat()}",
        kind="repeat_offender",
        severity="critical",
        group_key=f"node:{node}",
        summary=f"{node}: {reason}",
        node=node,
        details={"incidents": incidents, "action": "replace"},
    )
    raise_alert(conn, spec, now)
