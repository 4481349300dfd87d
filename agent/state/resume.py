"""A lost or unreadable state file never lifts a quarantine: the open incident is read back from the node.

The state file (``agent.state.store``) is where the agent keeps its open incident. Should it be gone (a new
disk, a wiped ``/var/lib/gpuhealth``) or unreadable (set aside as corrupt), a fresh agent would start with no
incident and, with its GPUs reading clean, take its own taint off a node that was held out of service. So on
such a start the agent reads back what it wrote where it cannot be lost with the node: its own label, taint
and incident annotation (Kubernetes), or its node metadata and eligibility (Nomad), and the aggregator's
record of the node (its open incident, its held permit, a hold). When any of them says an incident was open,
that incident continues: the same id and start, the action the taint or the aggregator names (never lower),
quarantined by hand when the node's condition or the aggregator says so. The node then stays out of service
until the normal path ends the incident (clean readings and the dwell, a validated recovery, or a human's
release for ``replace`` and manual quarantines).

The read-back waits for the first pass that can read the node: while the orchestrator cannot be reached the
planner changes nothing anyway, so nothing is lifted meanwhile. The aggregator is asked once, on a thread so
that no pass (and no taint) waits for it; unreachable, the node's own evidence is enough.

``resumed_state`` is the pure decision (``tests/unit/agent/state/test_resume.py``); :class:`LostState` is
the pending read-back the loop runs until it is finished.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from agent.state.machine import (
    ALL_CHECKS_PASSED,
    DIAGNOSTIC_RUNNING,
    MANUAL_QUARANTINE,
    NO_READING_YET,
)
from core.aggregator_api import IncidentSummary, NodeDetail, Permit
from core.findings import Action, Finding, Status, worst_action
from core.health import Incident
from core.plan_memory import RemediationMemory
from core.steps import NodeFacts
from remediation.plan.planner import TESTING_TAINT

log = structlog.get_logger(__name__)

STATE_RESTORED = "STATE_RESTORED"
"""Code of the finding that stands for an incident read back after the state file was lost."""
_OUT_OF_SERVICE_LABELS = frozenset({"unhealthy", "quarantined"})
_NOT_INCIDENT_TAINTS = frozenset({TESTING_TAINT})  # a deep diagnostic's taint: no incident behind it
_NOT_INCIDENT_REASONS = frozenset({ALL_CHECKS_PASSED, NO_READING_YET, DIAGNOSTIC_RUNNING, "Unknown"})
_ID_START = re.compile(r"-(\d{8}T\d{6}Z)-(?:lost-)?[0-9a-f]+$")
_QUARANTINE_PREFIX = "quarantined by hand: "


@dataclass(frozen=True)
class AggregatorRecord:
    """What the aggregator holds about the node: its open incident, its active permit, a hold."""

    incident: IncidentSummary | None = None
    permit: Permit | None = None
    hold: str | None = None


def record_from(detail: NodeDetail) -> AggregatorRecord:
    """The parts of ``GET /v1/nodes/{node}`` the read-back uses (a closed incident is no record)."""
    incident = detail.incident if detail.incident is not None and detail.incident.open else None
    permit = detail.permit if detail.permit is not None and detail.permit.active else None
    return AggregatorRecord(incident=incident, permit=permit, hold=detail.hold)


@dataclass(frozen=True)
class Resumed:
    """The incident read back, whether a human holds it, and the planner's memory to go with it."""

    incident: Incident
    manual: bool
    note: str | None
    memory: RemediationMemory
    evidence: tuple[str, ...]


def resumed_state(
    node: str, facts: NodeFacts, record: AggregatorRecord | None, now: datetime
) -> Resumed | None:
    """The incident the node's marks and the aggregator's record say is open; None when neither does."""
    record = record or AggregatorRecord()
    evidence = _evidence(facts, record)
    if not evidence:
        return None
    known = record.incident
    incident_id = facts.incident_annotation or (known.id if known is not None else None)
    # Random like a normal id: no other node may take a read-back id first (docs/security.md).
    incident_id = incident_id or f"inc-{node}-{now:%Y%m%dT%H%M%SZ}-lost-{secrets.token_hex(8)}"
    same = known if known is not None and known.id == incident_id else None
    manual = facts.condition_reason == MANUAL_QUARANTINE or record.hold is not None
    action = _action(facts, same, record.permit, manual)
    reasons = list(same.reasons) if same is not None else []
    code = _condition_code(facts) or STATE_RESTORED
    if code not in reasons:
        reasons.append(code)
    if manual and MANUAL_QUARANTINE not in reasons:
        reasons.append(MANUAL_QUARANTINE)
    finding = Finding(
        check="state",
        gpu=None,
        status=Status.FAIL,
        code=code,
        message=_message(facts, action, evidence),
        action=action,
    )
    incident = Incident(
        id=incident_id,
        started_at=_started_at(incident_id, same, now),
        reasons=reasons,
        gpus=list(facts.unhealthy_gpus or ()),
        action=action,
        findings=[finding],
    )
    memory = RemediationMemory(
        active_incident=incident_id,
        cordoned_for=incident_id if facts.cordoned_by_us and facts.unschedulable else None,
        # Its opening was announced when it opened: the Event is not recorded a second time.
        emitted_events=(f"{incident_id}/opened/{action.value}",),
    )
    note = _quarantine_note(facts, record) if manual else None
    return Resumed(incident, manual, note, memory, evidence)


class LostState:
    """The read-back still to do after a start without a usable state file.

    The aggregator is asked at once, on a thread of its own, so that no pass ever waits for it: the taint of
    a fault found meanwhile must not wait for an aggregator that is slow or down. On the first pass that can
    read the node, the node's own marks decide with whatever the aggregator has answered by then; when the
    node shows no mark, the read-back waits (pass after pass, without blocking) for the aggregator's answer,
    and is finished once that came (or failed).
    """

    def __init__(
        self,
        node: str,
        read_record: Callable[[], AggregatorRecord | None] | None,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        self._node = node
        self._clock = clock
        self._record: AggregatorRecord | None = None
        self._answered = threading.Event()
        self.finished = False
        if read_record is None:
            self._answered.set()
        else:
            threading.Thread(
                target=self._ask, args=(read_record,), name=f"gpuhealth-read-back:{node}", daemon=True
            ).start()

    def _ask(self, read_record: Callable[[], AggregatorRecord | None]) -> None:
        try:
            self._record = read_record()
        finally:
            self._answered.set()

    @property
    def answered(self) -> bool:
        """True once the aggregator answered (or could not), or when there is none to ask."""
        return self._answered.is_set()

    def read_back(self, facts: NodeFacts) -> Resumed | None:
        """The incident to continue, given the node as read now (``facts.exists``); sets ``finished`` once
        nothing more can come of it."""
        answered = self.answered
        resumed = resumed_state(self._node, facts, self._record if answered else None, self._clock())
        if resumed is None and not answered:
            return None  # no mark on the node: what the aggregator says decides, on a later pass
        self.finished = True
        if resumed is None:
            log.info("state_lost_nothing_open", node=self._node, aggregator_record=self._record is not None)
            return None
        log.warning(
            "incident_resumed_after_state_loss",
            node=self._node,
            incident=resumed.incident.id,
            action=resumed.incident.action.value,
            manual=resumed.manual,
            evidence=list(resumed.evidence),
        )
        return resumed


def _evidence(facts: NodeFacts, record: AggregatorRecord) -> tuple[str, ...]:
    found = []
    if facts.incident_annotation:
        found.append("incident annotation")
    if facts.taint_value is not None and facts.taint_value not in _NOT_INCIDENT_TAINTS:
        found.append("taint")
    if facts.state_label in _OUT_OF_SERVICE_LABELS:
        found.append("state label")
    if record.incident is not None:
        found.append("aggregator incident")
    if record.hold is not None:
        found.append("aggregator hold")
    return tuple(found)


def _action(facts: NodeFacts, known: IncidentSummary | None, permit: Permit | None, manual: bool) -> Action:
    """The most severe action any evidence names; ``replace`` (a human decides) when none names one, or
    when the node is held by hand."""
    named: list[Action] = []
    if facts.taint_value in {a.value for a in Action}:
        named.append(Action(facts.taint_value))
    if known is not None:
        named.append(known.action)
    if permit is not None and (known is None or permit.incident_id == known.id):
        named.append(permit.action)
    if facts.state_label == "quarantined" or manual:
        named.append(Action.REPLACE)
    action = worst_action(named)
    return action if action.takes_node_out_of_service else Action.REPLACE


def _condition_code(facts: NodeFacts) -> str | None:
    """The code the node's condition (Nomad: its metadata) shows for the incident, when it shows one."""
    reason = facts.condition_reason
    if not reason or reason in _NOT_INCIDENT_REASONS or reason == MANUAL_QUARANTINE:
        return None
    return reason if re.fullmatch(r"[A-Za-z0-9_]{1,64}", reason) else None


def _message(facts: NodeFacts, action: Action, evidence: tuple[str, ...]) -> str:
    shown = facts.condition_message or ""
    prefix = f"{action.value}: "
    if shown.startswith(prefix) and _condition_code(facts) is not None:
        return shown.removeprefix(prefix)  # the condition then reads as before the restart
    return f"incident continued after the agent's state was lost (from: {', '.join(evidence)})"


def _started_at(incident_id: str, known: IncidentSummary | None, now: datetime) -> datetime:
    """When the incident began: the aggregator's record, else the time its id carries, else now."""
    if known is not None:
        return known.started_at
    match = _ID_START.search(incident_id)
    if match is not None:
        return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return now


def _quarantine_note(facts: NodeFacts, record: AggregatorRecord) -> str:
    shown = facts.condition_message or ""
    if shown.startswith(_QUARANTINE_PREFIX):
        return shown.removeprefix(_QUARANTINE_PREFIX)
    return record.hold or "held out of service (read back after the agent's state was lost)"
