"""Ingest of agent reports: one write transaction per report, idempotent by (node, seq).

The node's row is locked first (``SELECT ... FOR UPDATE``; on SQLite the write transaction already holds the
database lock), so a report retried against a second aggregator is either the first to count or sees the
first one's sequence number and is acknowledged without counting again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import Connection, bindparam, func, select, update

from aggregator import breaker, incident_ids, readings_ring
from aggregator.alerts import raising
from aggregator.history_budget import HistoryBudget
from aggregator.settings import AggregatorSettings
from aggregator.store import requests as node_requests
from aggregator.store.common import insert_ignoring_conflict, record_event
from aggregator.store.tables import events, incidents, nodes, requests
from core.aggregator_api import BAD_STATES, Report, ReportAck
from core.findings import SHARED_CAUSE_CODES, Action
from core.health import NodeState
from core.redaction import redact_text

log = structlog.get_logger(__name__)

SHADOW = "shadow"
"""Event kind of a decision a profile in shadow mode made and did not write (`gpuhealth events --shadow`)."""


class NodeBatch:
    """What the reports of one transaction share: their nodes' rows locked by one query (in name order, so
    two transactions never wait on each other's rows), and their node updates sent as one ``executemany``.

    At fleet scale nearly every report is a node's routine update, and on PostgreSQL the two round trips
    each such report cost (lock and read its row, write it) were most of its time. A node met twice in
    one batch is read again after the updates before it are sent, as is everything that reads the nodes
    table (the breaker), so each report still decides on what the ones before it wrote.
    """

    def __init__(self, conn: Connection, node_names: list[str]) -> None:
        self._conn = conn
        query = (
            select(nodes.c.name, *_DECISION_COLUMNS)
            .where(nodes.c.name.in_(sorted(set(node_names))))
            .order_by(nodes.c.name)
            .with_for_update()
        )
        self._rows = {row.name: row for row in conn.execute(query)}
        self._seen: set[str] = set()
        self._updates: list[dict[str, Any]] = []

    def locked_row(self, node: str) -> Any:
        """The node's row as locked at the batch's start, or None: read it (new node, or seen before)."""
        if node in self._seen:
            self.flush()
            return None
        self._seen.add(node)
        return self._rows.pop(node, None)

    def update_node(self, values: dict[str, Any]) -> None:
        """Queue one node's update for the batch's single ``executemany``."""
        self._updates.append(values)

    def flush(self) -> None:
        """Send the queued node updates (before anything reads the nodes table, and at the batch's end)."""
        if self._updates:
            self._conn.execute(_UPDATE_NODE, self._updates)
            self._updates = []


def ingest_report(
    conn: Connection,
    report: Report,
    settings: AggregatorSettings,
    now: datetime,
    batch: NodeBatch | None = None,
    *,
    history: HistoryBudget | None = None,
) -> ReportAck:
    """Store one report (in the caller's write transaction) and say what the agent should do next.

    With ``batch``, the node's row may come from the batch and its update go out with the batch's
    (:meth:`NodeBatch.flush` before the transaction commits). With ``history``, the node's own timeline
    rows are bounded per minute (:mod:`aggregator.history_budget`).
    """
    row = (batch and batch.locked_row(report.node)) or _locked_node(conn, report, settings, now)
    if report.epoch == row.epoch:
        if report.seq <= row.last_seq:
            return _ack(
                conn, report, row.hold, accepted=False, pending=row.pending_requests, last_seq=row.last_seq
            )
        if row.last_seq >= 0 and report.seq - row.last_seq > settings.max_seq_jump:
            # A seq far ahead would make every later genuine report look like a retry: refuse it, so the
            # agent starts a new epoch instead of the node going silent.
            log.warning(
                "report refused: sequence jump", node=report.node, seq=report.seq, last_seq=row.last_seq
            )
            refused = (
                f"seq {report.seq} is more than max_seq_jump ({settings.max_seq_jump}) ahead of "
                f"node {report.node}'s last accepted seq {row.last_seq}; start a new epoch"
            )
            return _ack(
                conn,
                report,
                row.hold,
                accepted=False,
                pending=row.pending_requests,
                last_seq=row.last_seq,
                refused=refused,
            )
    elif row.last_seq >= 0:
        _timeline_row(
            conn,
            history,
            now,
            at=now,
            kind="report_epoch",
            node=report.node,
            message=f"new report epoch {report.epoch or '(none)'}: sequence restarted at {report.seq}",
            details={"epoch": report.epoch, "previous_last_seq": row.last_seq},
        )
        log.info("report sequence restarted", node=report.node, epoch=report.epoch)
    previous_state = NodeState(row.state) if row.last_seq >= 0 else None
    incident_id = _track_incident(conn, report, row.incident_id, now)
    if readings_ring.due(row, incident_id, now):  # a few minutes apart: most reports skip the ring
        readings_ring.sample(conn, report.node, _readings(report), row=row, incident_id=incident_id, now=now)
    timeline = _Timeline(conn, history, now)
    _record_timeline(timeline, report, row=row, previous_state=previous_state, incident_id=incident_id)
    if history is not None:
        history.summarise(conn, report.node, now)
    hold = row.hold
    if incident_id is not None and incident_id != row.incident_id and hold is None:
        hold = _repeat_offender_hold(conn, report.node, settings, now)
    pending = row.pending_requests
    if report.acknowledged_requests:
        pending = node_requests.mark_applied(conn, report.node, report.acknowledged_requests, now)
    if hold is not None and hold != row.hold:
        node_requests.create(
            conn, report.node, kind="quarantine", reason=hold, requested_by="aggregator", now=now
        )
        pending = node_requests.pending_count(conn, report.node)
    values = _node_values(report, settings, now)
    if incident_id is not None:
        values["gpus"] = _mark_incident_gpus(
            conn, report, values["gpus"], same_incident=incident_id == row.incident_id
        )
    values.update(
        incident_id=incident_id, hold=hold, pending_requests=pending, last_seq=report.seq, epoch=report.epoch
    )
    turned_bad = report.state in BAD_STATES and previous_state not in BAD_STATES
    _save_node(conn, batch, {"node_name": report.node, **values}, now_visible=turned_bad)
    if turned_bad:
        breaker.evaluate(conn, settings, now)  # it counts the nodes table: this report's state is in it
    return _ack(conn, report, hold, accepted=True, pending=pending, last_seq=report.seq)


def _save_node(
    conn: Connection, batch: NodeBatch | None, values: dict[str, Any], *, now_visible: bool
) -> None:
    """Write the node's row now, or queue it with the batch's (sent at once when ``now_visible``)."""
    if batch is None:
        conn.execute(_UPDATE_NODE, values)
        return
    batch.update_node(values)
    if now_visible:
        batch.flush()


# Built once with bound parameters: building the statement anew for every report cost more than running it.
_UPDATE_NODE = (
    update(nodes)
    .where(nodes.c.name == bindparam("node_name"))
    .values(
        {
            **{
                name: bindparam(name)
                for name in (
                    "state",
                    "status",
                    "action",
                    "orchestrator",
                    "gpu_count",
                    "interval_s",
                    "last_report_at",
                    "stale_at",
                    "labels",
                    "gpus",
                    "findings",
                    "incident_id",
                    "hold",
                    "pending_requests",
                    "last_seq",
                    "epoch",
                )
            },
            "reports_accepted": nodes.c.reports_accepted + 1,
        }
    )
)


def _node_values(report: Report, settings: AggregatorSettings, now: datetime) -> dict[str, Any]:
    interval = report.interval_s or settings.report_interval_s
    return {
        "state": report.state.value,
        "status": report.verdict.status.value,
        "action": report.verdict.action.value,
        "orchestrator": report.orchestrator,
        "gpu_count": len(report.gpus),
        "interval_s": interval,
        "last_report_at": now,
        "stale_at": now + timedelta(seconds=interval * settings.stale_after_intervals),
        "labels": dict(report.labels),
        "gpus": [gpu.model_dump(mode="json") for gpu in report.gpus],
        "findings": [finding.model_dump(mode="json") for finding in report.verdict.findings],
    }


def _mark_incident_gpus(
    conn: Connection, report: Report, gpus: list[dict[str, Any]], *, same_incident: bool
) -> list[dict[str, Any]]:
    """Mark the GPUs an open incident is about (``in_incident``), and keep them marked until it closes.

    A GPU that failed stays the incident's GPU after its finding clears (an XID leaves the window, a reset
    GPU reads healthy again) while the node is still tainted and drained: the fleet page must keep showing
    which GPU the node is out of service for. Only nodes in an incident pay for reading the stored list.
    """
    held: set[str] = set()
    if same_incident:
        stored = conn.execute(select(nodes.c.gpus).where(nodes.c.name == report.node)).scalar_one_or_none()
        held = {str(gpu.get("uuid")) for gpu in stored or [] if gpu.get("in_incident")}
    return [
        {**gpu, "in_incident": True} if gpu.get("status") == "fail" or gpu.get("uuid") in held else gpu
        for gpu in gpus
    ]


# Only what the decision needs: decoding the stored GPU list and labels again would cost more than the rest
# of the transaction.
_DECISION_COLUMNS = (
    nodes.c.state,
    nodes.c.last_seq,
    nodes.c.epoch,
    nodes.c.incident_id,
    nodes.c.hold,
    nodes.c.pending_requests,
    nodes.c.findings,
    nodes.c.readings_sampled_at,
    nodes.c.readings_slot,
    nodes.c.readings_after_incident,
    nodes.c.readings_after_left,
)


def _locked_node(conn: Connection, report: Report, settings: AggregatorSettings, now: datetime) -> Any:
    query = select(*_DECISION_COLUMNS).where(nodes.c.name == report.node).with_for_update()
    row = conn.execute(query).first()
    if row is None:
        first = _node_values(report, settings, now) | {
            "name": report.node,
            "first_seen_at": now,
            "last_seq": -1,
            "reports_accepted": 0,
            "pending_requests": 0,
        }
        insert_ignoring_conflict(conn, nodes, first)
        row = conn.execute(query).one()
    return row


def _track_incident(conn: Connection, report: Report, previous_id: str | None, now: datetime) -> str | None:
    """Open, update or close incident rows so they follow the agent's open incident; the stored id (an id
    another node holds is recorded under a node-scoped one: :mod:`aggregator.incident_ids`)."""
    incident = report.incident
    stored, owner = incident_ids.resolve(conn, report.node, incident.id if incident else None)
    if previous_id is not None and (incident is None or stored != previous_id):
        closed = update(incidents).where(incidents.c.id == previous_id).values(ended_at=now)
        closed_action = conn.execute(closed.returning(incidents.c.action)).scalar_one_or_none()
        raising.incident_resolved(
            conn, node=report.node, incident_id=previous_id, action=closed_action or "none", now=now
        )
        record_event(
            conn,
            at=now,
            kind="incident_closed",
            node=report.node,
            incident_id=previous_id,
            message=f"incident {previous_id} closed",
            details={
                "readings": _readings(report),
                # the node's samples while it was open (aggregator/readings_ring.py)
                "readings_during": readings_ring.samples(conn, report.node, incident_id=previous_id),
            },
        )
    if incident is None:
        return None
    values = {"reasons": list(incident.reasons), "action": incident.action.value}
    if stored is not None and owner is incident_ids.Owner.OWN:
        previous_action = conn.execute(
            select(incidents.c.action).where(incidents.c.id == stored)
        ).scalar_one()
        conn.execute(update(incidents).where(incidents.c.id == stored).values(ended_at=None, **values))
        _alert_if_escalated(conn, report, stored, previous_action=previous_action, now=now)
        return stored
    if owner is incident_ids.Owner.FOREIGN:
        # Another node used this id first (to hide this node's incident, or by a bug): this node's
        # incident is recorded all the same, under an id no node can send.
        stored = incident_ids.scoped_id(incident.id)
        log.warning("incident id of another node: node-scoped id given", node=report.node, incident=stored)
    incident_id = stored or incident.id
    conn.execute(
        incidents.insert().values(
            id=incident_id, node=report.node, started_at=incident.started_at, ended_at=None, **values
        )
    )
    gpus = incident_gpus(report)
    named = "".join(
        f" on GPU {gpu['index']}" + (f" (SN {gpu['serial']})" if gpu.get("serial") else "")
        for gpu in gpus[:1]
    ) + (f" and {len(gpus) - 1} more" if len(gpus) > 1 else "")
    record_event(
        conn,
        at=now,
        kind="incident_opened",
        node=report.node,
        incident_id=incident_id,
        message=f"incident opened: {', '.join(incident.reasons) or 'no reason given'}{named}; "
        f"action {incident.action.value}",
        details=values
        | {
            "gpus": gpus,
            "opened_by": [f.model_dump(mode="json") for f in report.verdict.findings if f.status != "ok"],
            # What each GPU read when it opened (the evidence for a hardware return, docs/fleet-view.md).
            "readings": _readings(report),
            # and in the samples before it (aggregator/readings_ring.py), oldest first
            "readings_before": readings_ring.samples(conn, report.node),
        },
    )
    log.info("incident opened", node=report.node, incident=incident_id)
    raising.incident_opened(
        conn,
        node=report.node,
        incident_id=incident_id,
        action=incident.action.value,
        reasons=list(incident.reasons),
        gpus=_failing_gpus(report),
        labels=report.labels,
        now=now,
    )
    return incident_id


def _alert_if_escalated(
    conn: Connection, report: Report, incident_id: str, *, previous_action: str, now: datetime
) -> None:
    incident = report.incident
    assert incident is not None
    if incident.action.rank > Action(previous_action).rank:
        raising.incident_escalated(
            conn,
            node=report.node,
            incident_id=incident_id,
            previous_action=previous_action,
            action=incident.action.value,
            reasons=list(incident.reasons),
            gpus=_failing_gpus(report),
            labels=report.labels,
            now=now,
        )


def _readings(report: Report) -> dict[str, Any]:
    """Each GPU's readings in the report, by UUID (kept with an incident's opening and closing)."""
    return {
        gpu.uuid: gpu.readings.model_dump(mode="json", exclude_none=True)
        for gpu in report.gpus
        if gpu.readings is not None
    }


def incident_gpus(report: Report) -> list[dict[str, Any]]:
    """The GPUs a new incident is about, with what names them to a person: those its failing findings name
    (or, with none, those that report a failing status), in index order."""
    named = {f.gpu for f in report.verdict.findings if f.gpu and f.status == "fail"}
    chosen = [gpu for gpu in report.gpus if gpu.uuid in named or gpu.status == "fail"]
    return [
        {
            "uuid": gpu.uuid,
            "index": gpu.index,
            "pci_bus_id": gpu.pci_bus_id,
            "serial": gpu.serial,
            "name": gpu.name,
        }
        for gpu in sorted(chosen, key=lambda gpu: gpu.index)
    ]


def _failing_gpus(report: Report) -> list[str]:
    """GPUs named by the report's non-ok findings, for the alert text."""
    return sorted({f.gpu for f in report.verdict.findings if f.gpu and f.status != "ok"})


class _Timeline:
    """Where a report's timeline rows go: the history, within the node's bound when there is one."""

    def __init__(self, conn: Connection, history: HistoryBudget | None, now: datetime) -> None:
        self.conn = conn
        self.history = history
        self.now = now

    def add(self, *, bounded: bool = True, **row: Any) -> None:
        """Write one row (``bounded``: it counts against the node's bound and may be held back)."""
        if bounded:
            _timeline_row(self.conn, self.history, self.now, **row)
        else:
            record_event(self.conn, **row)


def _timeline_row(conn: Connection, history: HistoryBudget | None, now: datetime, **row: Any) -> None:
    """Write one of the node's own timeline rows unless the node is over its bound (then it is counted:
    by arrival, ``now``, never by the time the row carries, which a node may choose)."""
    if history is None or history.admit(row["node"], row["kind"], row.get("incident_id"), now):
        record_event(conn, **row)


def _record_timeline(
    timeline: _Timeline,
    report: Report,
    *,
    row: Any,
    previous_state: NodeState | None,
    incident_id: str | None,
) -> None:
    """History for on-call: state changes, changed findings and the agent's actions."""
    node, now = report.node, timeline.now
    if previous_state != report.state:
        was = previous_state.value if previous_state else "new"
        timeline.add(
            at=now,
            kind="state",
            node=node,
            incident_id=incident_id,
            message=f"{was} -> {report.state.value}",
            details={"from": was, "to": report.state.value},
        )
        if report.state in BAD_STATES and previous_state not in BAD_STATES:
            # Never held back: the breaker counts these rows.
            timeline.add(
                bounded=False,
                at=now,
                kind=breaker.TURNED_UNHEALTHY,
                node=node,
                incident_id=incident_id,
                message=f"turned {report.state.value}",
            )
    old_codes = _finding_keys(row.findings if previous_state else [])
    new_codes = _finding_keys([f.model_dump(mode="json") for f in report.verdict.findings])
    _record_shared_cause(timeline, node, old_codes, new_codes, incident_id=incident_id)
    if new_codes != old_codes:
        codes = sorted({code for code, _gpu, _status in new_codes})
        timeline.add(
            at=now,
            kind="findings",
            node=node,
            incident_id=incident_id,
            message=("findings: " + ", ".join(codes)) if codes else "findings cleared",
            details={
                "findings": [f.model_dump(mode="json") for f in report.verdict.findings if f.status != "ok"],
                # when the agent read them (the row is stamped on arrival): a replay tells a late report
                # (an outbox flushed after an outage) from a fresh one, and never acts on the late one
                "reported_at": report.sent_at.isoformat(),
            },
        )
    for action in report.actions:
        shadow = action.result == "shadow"  # decided by a profile in shadow mode, recorded, not written
        timeline.add(
            at=min(action.at, now),  # a node's clock may not put its rows above everything else for good
            kind=SHADOW if shadow else "action",
            node=node,
            incident_id=_action_incident(timeline.conn, node, action.incident_id, incident_id),
            message=action.message
            if shadow and action.message
            else f"{action.action} {action.result}" + (f": {action.message}" if action.message else ""),
            details={"action": action.action, "result": action.result}
            # a diagnostic's raw dcgmi output (bounded on the wire), redacted again: an agent may be old
            | ({"output": redact_text(action.output)} if action.output else {}),
            repeatable=True,  # the same step done or refused again (a drain retried): one row with a count
        )


def _action_incident(conn: Connection, node: str, claimed: str | None, current: str | None) -> str | None:
    """The incident an action belongs to: the one it names when that is the node's own, else the node's
    open one (a node never writes into another node's incident)."""
    if claimed is None or claimed == current:
        return current
    return incident_ids.own_or(conn, node, claimed, current)


def _record_shared_cause(
    timeline: _Timeline,
    node: str,
    old: set[tuple[str, str | None, str]],
    new: set[tuple[str, str | None, str]],
    *,
    incident_id: str | None,
) -> None:
    """A node that starts reporting a shared cause (the whole fabric down) is counted by the breaker (so the
    row is never held back by the node's history bound)."""
    started = {code for code, _gpu, _status in new if code in SHARED_CAUSE_CODES} - {
        code for code, _gpu, _status in old if code in SHARED_CAUSE_CODES
    }
    for code in sorted(started):
        timeline.add(
            bounded=False,
            at=timeline.now,
            kind=breaker.SHARED_CAUSE,
            node=node,
            incident_id=incident_id,
            message=f"reports {code}: a cause shared with other nodes is possible",
            details={"code": code},
        )


def _finding_keys(findings: list[dict[str, Any]]) -> set[tuple[str, str | None, str]]:
    return {(f["code"], f.get("gpu"), f["status"]) for f in findings if f.get("status") != "ok"}


def _repeat_offender_hold(
    conn: Connection, node: str, settings: AggregatorSettings, now: datetime
) -> str | None:
    """K incidents within D days -> action replace: the node stays quarantined until a human releases it.

    Counted on the aggregator's clock (when each incident was first reported), and only since the last
    release by a human: releasing the node says its problem was dealt with (e.g. the GPU replaced).
    """
    since = now - timedelta(days=settings.repeat_offender_days)
    released = conn.execute(
        select(func.max(requests.c.created_at)).where(requests.c.node == node, requests.c.kind == "release")
    ).scalar_one()
    in_period = events.c.at > released if released is not None and released >= since else events.c.at >= since
    count = conn.execute(
        select(func.count())
        .select_from(events)
        .where(events.c.node == node, events.c.kind == "incident_opened", in_period)
    ).scalar_one()
    if count < settings.repeat_offender_incidents:
        return None
    reason = f"repeat offender: {count} incidents in {settings.repeat_offender_days:g} days; action replace"
    record_event(
        conn, at=now, kind="repeat_offender", node=node, message=reason, details={"incidents": count}
    )
    log.warning("repeat offender held", node=node, incidents=count)
    raising.repeat_offender(conn, node=node, incidents=count, reason=reason, now=now)
    return reason


def _ack(
    conn: Connection,
    report: Report,
    hold: str | None,
    *,
    accepted: bool,
    pending: int,
    last_seq: int,
    refused: str | None = None,
) -> ReportAck:
    requests = node_requests.pending(conn, report.node) if pending else []
    return ReportAck(
        node=report.node,
        seq=report.seq,
        accepted=accepted,
        pending_requests=requests,
        hold=hold,
        last_seq=last_seq,
        refused=refused,
    )
