"""Read side: fleet summary, node list and detail, incidents and the event history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, case, func, or_, select

from aggregator import breaker, permits, readings_ring
from aggregator.settings import AggregatorSettings
from aggregator.store import requests as node_requests
from aggregator.store.common import event_from_row
from aggregator.store.tables import events, incidents, nodes
from aggregator.timeline import arrange
from core.aggregator_api import (
    STALE,
    Event,
    FleetSummary,
    GridNode,
    IncidentDetail,
    IncidentSummary,
    NodeDetail,
    NodeSummary,
)
from core.health import NodeState
from remediation.plan.profiles import PROFILE_LABEL

MAX_EVENTS = 1000
MAX_NODES_PAGE = 10_000  # a page of the node list: all of a 10,000-node fleet in one answer


def fleet_summary(conn: Connection, settings: AggregatorSettings, now: datetime) -> FleetSummary:
    """Counts by state (stale nodes counted as ``stale``), held and stale nodes, breaker and budget."""
    shown = case((nodes.c.stale_at <= now, STALE), else_=nodes.c.state)
    by_state = {
        str(state): int(count)
        for state, count in conn.execute(select(shown, func.count()).group_by(shown)).all()
    }
    totals = conn.execute(select(func.count(), func.coalesce(func.sum(nodes.c.gpu_count), 0))).one()
    # Two indexed lookups rather than one OR, which would scan every node.
    reported = select(nodes.c.name).where(nodes.c.state == NodeState.QUARANTINED.value)
    held = select(nodes.c.name).where(nodes.c.hold.is_not(None))
    quarantined = sorted(set(conn.execute(reported).scalars()) | set(conn.execute(held).scalars()))[
        :MAX_EVENTS
    ]
    stale = conn.execute(
        select(nodes.c.name).where(nodes.c.stale_at <= now).order_by(nodes.c.name).limit(MAX_EVENTS)
    ).scalars()
    open_incidents = conn.execute(
        select(func.count()).select_from(incidents).where(incidents.c.ended_at.is_(None))
    ).scalar_one()
    profile = nodes.c.labels[PROFILE_LABEL].as_string()
    by_profile = {
        str(name): int(count)
        for name, count in conn.execute(
            select(profile, func.count()).where(profile.is_not(None)).group_by(profile)
        ).all()
    }
    return FleetSummary(
        generated_at=now,
        profiles=by_profile,
        nodes=int(totals[0]),
        gpus=int(totals[1]),
        by_state=by_state,
        open_incidents=int(open_incidents),
        quarantined=quarantined,
        stale=list(stale),
        breaker=breaker.status(conn, settings, now),
        budget=permits.budget_status(conn, settings, now),
    )


def _summary_from_row(row: Any, now: datetime) -> NodeSummary:
    return NodeSummary(
        name=row.name,
        state=STALE if row.stale_at <= now else row.state,
        reported_state=row.state,
        status=row.status,
        action=row.action,
        orchestrator=row.orchestrator,
        gpu_count=row.gpu_count,
        last_report_at=row.last_report_at,
        last_seq=row.last_seq,
        reports_accepted=row.reports_accepted,
        incident_id=row.incident_id,
        hold=row.hold,
        profile=_profile(row.labels),
        interval_s=row.interval_s,
    )


def _profile(labels: object) -> str | None:
    """The node's behaviour profile, as its agent reports it (the ``gpuhealth.io/profile`` label)."""
    value = labels.get(PROFILE_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None


def node_list(
    conn: Connection,
    now: datetime,
    *,
    state: str | None = None,
    limit: int = MAX_NODES_PAGE,
    after: str | None = None,
) -> list[NodeSummary]:
    """Nodes by name (optionally only those shown in ``state``, where ``stale`` is a state), at most
    ``limit`` of them, starting after the node named ``after``."""
    query = select(nodes).order_by(nodes.c.name).limit(limit)
    if after is not None:
        query = query.where(nodes.c.name > after)
    if state == STALE:
        query = query.where(nodes.c.stale_at <= now)
    elif state is not None:
        query = query.where(nodes.c.state == state, nodes.c.stale_at > now)
    return [_summary_from_row(row, now) for row in conn.execute(query)]


# The labels the fleet page filters by, as agents usually report them (the Kubernetes well-known zone label,
# or plain names from the agent's settings).
ZONE_LABELS = ("topology.kubernetes.io/zone", "zone")
POOL_LABELS = (
    "gpuhealth.io/pool",
    "pool",
    "nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
)
_GPU_LETTER = {"ok": "o", "warn": "w", "fail": "f", "unknown": "u"}


def fleet_grid(conn: Connection, now: datetime) -> list[GridNode]:
    """Every node as the fleet page draws it: shown state, zone, pool and one letter per GPU."""
    query = select(
        nodes.c.name, nodes.c.state, nodes.c.stale_at, nodes.c.labels, nodes.c.gpus, nodes.c.incident_id
    ).order_by(nodes.c.name)
    return [
        GridNode(
            name=row.name,
            state=STALE if row.stale_at <= now else row.state,
            zone=_first_label(row.labels, ZONE_LABELS),
            pool=_first_label(row.labels, POOL_LABELS),
            gpus=_gpu_letters(row.gpus),
            incident_id=row.incident_id,
        )
        for row in conn.execute(query)
    ]


def _first_label(labels: dict[str, str] | None, names: tuple[str, ...]) -> str | None:
    found = labels or {}
    return next((found[name] for name in names if name in found), None)


def _gpu_letters(gpus: list[dict[str, Any]] | None) -> str:
    ordered = sorted(gpus or [], key=lambda gpu: int(gpu.get("index", 0)))
    return "".join(
        "f" if gpu.get("in_incident") else _GPU_LETTER.get(str(gpu.get("status", "ok")), "u")
        for gpu in ordered
    )


def node_detail(conn: Connection, name: str, now: datetime) -> NodeDetail | None:
    """One node with GPUs, findings, open incident, pending requests, permit and recent timeline."""
    row = conn.execute(select(nodes).where(nodes.c.name == name)).first()
    if row is None:
        return None
    incident = incident_summary(conn, row.incident_id) if row.incident_id else None
    return NodeDetail(
        **_summary_from_row(row, now).model_dump(),
        labels=row.labels,
        gpus=row.gpus,
        findings=row.findings,
        incident=incident,
        pending_requests=node_requests.pending(conn, name),
        permit=permits.active_permit(conn, name, now),
        timeline=node_timeline(conn, name, row.incident_id),
        recent_readings=readings_ring.samples(conn, name),
    )


NODE_TIMELINE = 50
"""Rows of a node's page and ``gpuhealth node``: its newest events, and its open incident's key ones."""


def node_timeline(conn: Connection, name: str, incident_id: str | None) -> list[Event]:
    """The node's newest events, in the order of cause; with an open incident, its first fault, its
    opening and its first marks (the taint) are kept however many lines came after them."""
    newest = event_list(conn, node=name, limit=NODE_TIMELINE)
    if incident_id is not None:
        have = {event.id for event in newest}
        newest.extend(event for event in _incident_keys(conn, incident_id) if event.id not in have)
    return arrange(newest)


def _incident_keys(conn: Connection, incident_id: str) -> list[Event]:
    """An incident's first fault, its opening and its first node writes: what its timeline always shows."""
    kept: list[Event] = []
    for kind in ("findings", "incident_opened", "action"):
        query = select(events).where(events.c.incident_id == incident_id, events.c.kind == kind)
        rows = conn.execute(query.order_by(events.c.at, events.c.id).limit(12 if kind == "action" else 1))
        kept.extend(event_from_row(row) for row in rows)
    return kept


def _incident_from_row(row: Any, extras: dict[str, dict[str, Any]]) -> IncidentSummary:
    extra = extras.get(row.id, {})
    return IncidentSummary(
        id=row.id,
        node=row.node,
        started_at=row.started_at,
        ended_at=row.ended_at,
        reasons=row.reasons,
        action=row.action,
        open=row.ended_at is None,
        gpus=extra.get("gpus") or [],
        opened_by=extra.get("opened_by") or [],
    )


def _incident_extras(conn: Connection, rows: list[Any]) -> dict[str, dict[str, Any]]:
    """Each incident's GPUs and opening findings. The findings, and the GPUs of a closed incident, are what
    its opening recorded; the GPUs of an open one are those its node's row marks ``in_incident`` (the ones
    the grid draws red, so that every view names the same GPUs, a GPU that failed later included)."""
    if not rows:
        return {}
    ids = [row.id for row in rows]
    opened = conn.execute(
        select(events.c.incident_id, events.c.details).where(
            events.c.kind == "incident_opened", events.c.incident_id.in_(ids)
        )
    )
    extras: dict[str, dict[str, Any]] = {
        str(incident_id): {"gpus": details.get("gpus") or [], "opened_by": details.get("opened_by") or []}
        for incident_id, details in opened
        if isinstance(details, dict)
    }
    open_ids = {row.id for row in rows if row.ended_at is None}
    if open_ids:
        marked = conn.execute(
            select(nodes.c.incident_id, nodes.c.gpus).where(nodes.c.incident_id.in_(open_ids))
        )
        for incident_id, gpus in marked:
            held = sorted(
                (gpu for gpu in gpus or [] if gpu.get("in_incident")),
                key=lambda gpu: int(gpu.get("index", 0)),
            )
            if held:
                extras.setdefault(str(incident_id), {})["gpus"] = [_incident_gpu(gpu) for gpu in held]
    return extras


def _incident_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    return {key: gpu.get(key) for key in ("uuid", "index", "pci_bus_id", "serial", "name")}


def incident_summary(conn: Connection, incident_id: str) -> IncidentSummary | None:
    """One incident without its timeline, or None."""
    row = conn.execute(select(incidents).where(incidents.c.id == incident_id)).first()
    return _incident_from_row(row, _incident_extras(conn, [row])) if row is not None else None


def incident_detail(conn: Connection, incident_id: str) -> IncidentDetail | None:
    """An incident with its whole timeline of findings and actions, oldest first."""
    summary = incident_summary(conn, incident_id)
    if summary is None:
        return None
    rows = conn.execute(
        select(events)
        .where(events.c.incident_id == incident_id, events.c.node == summary.node)
        .order_by(events.c.at, events.c.id)
        .limit(MAX_EVENTS)
    )
    # The oldest first: the fault, the opening and the taint are always in it (repeats are one row each).
    return IncidentDetail(**summary.model_dump(), timeline=arrange([event_from_row(r) for r in rows]))


def incident_list(
    conn: Connection, *, node: str | None = None, open_only: bool = False, since: datetime | None = None
) -> list[IncidentSummary]:
    """Incidents, newest first (at most 1,000); ``since`` keeps those open or ended since then."""
    query = select(incidents).order_by(incidents.c.started_at.desc()).limit(MAX_EVENTS)
    if node is not None:
        query = query.where(incidents.c.node == node)
    if open_only:
        query = query.where(incidents.c.ended_at.is_(None))
    if since is not None:
        query = query.where((incidents.c.ended_at.is_(None)) | (incidents.c.ended_at >= since))
    rows = list(conn.execute(query))
    extras = _incident_extras(conn, rows)
    return [_incident_from_row(row, extras) for row in rows]


def event_count(
    conn: Connection, *, node: str | None = None, since: datetime | None = None, kind: str | None = None
) -> int:
    """How many events ``event_list`` would page through for these filters (rows: a repeat counts once)."""
    query = select(func.count()).select_from(events)
    if kind is not None:
        query = query.where(events.c.kind == kind)
    if node is not None:
        query = query.where(events.c.node == node)
    if since is not None:
        query = query.where(events.c.at >= since)
    return int(conn.execute(query).scalar_one())


def event_list(
    conn: Connection,
    *,
    node: str | None = None,
    since: datetime | None = None,
    limit: int = 200,
    before: tuple[datetime, int] | None = None,
    kind: str | None = None,
) -> list[Event]:
    """The newest ``limit`` events (optionally of one node, since a time, older than ``before``: the time
    and id of an event), returned oldest first."""
    query = select(events).order_by(events.c.at.desc(), events.c.id.desc()).limit(min(limit, MAX_EVENTS))
    if before is not None:
        at, event_id = before
        query = query.where(or_(events.c.at < at, and_(events.c.at == at, events.c.id < event_id)))
    if node is not None:
        query = query.where(events.c.node == node)
    if since is not None:
        query = query.where(events.c.at >= since)
    if kind is not None:
        query = query.where(events.c.kind == kind)
    return [event_from_row(row) for row in reversed(conn.execute(query).all())]
