"""Debounce verdicts into a node health with one long-lived incident (docs/agent.md, "The loop", step 3).

Rules, in the order ``observe`` applies them:

* A reading is **blind** when the verdict's status is ``unknown`` (a source that should answer cannot). Blind
  readings never escalate and never count as clean: they freeze the per-code counters, break the clean
  streak, and after ``unknown_readings`` of them a node *without* an open incident shows ``unknown``. An open
  incident stays open, with its state, through any number of blind readings.
* A **bad** finding has status warn or fail. Each code keeps its own streak of consecutive bad readings
  (capped at ``polled_bad_readings`` so a steady state exports an unchanging state file).
* A bad finding whose action takes the node out of service (reset_gpu or worse) **triggers**: at once when
  its check is one of ``immediate_checks`` (fatal events), else once its code's streak reaches
  ``polled_bad_readings``. A trigger opens an incident, or joins the open one (new reason appended, action
  raised, never lowered; the id and start time stay).
* Bad findings below reset_gpu (XID 13 = restart_app, warn-only signals) held ``polled_bad_readings``
  consecutive readings make the node ``degraded`` (no incident: the node stays in service). It goes back to
  healthy after ``clean_readings_to_recover`` readings without such a held finding.
* A **clean** reading has only ``ok`` findings, or ``warn`` findings with action ``none``. An incident closes
  after ``clean_readings_to_recover`` consecutive clean readings *and* ``min_dwell_s`` seconds of clean
  readings without interruption — measured from the first clean reading after the last bad one, not from the
  opening, so a fault that keeps coming back keeps the incident open and a transient event is followed by a
  full quiet period. (Storing when the clean run began, not when the last bad reading was, keeps the state
  file unchanged while a fault persists.)
* An incident whose action is ``replace``, or one held by ``quarantine()``, never closes by itself: the node
  is ``quarantined`` until ``release_by_human()``. A human release is honoured: the codes still bad at that
  moment are *acknowledged* and do not open a new incident until they have cleared once.
* Recovery (``agent/recovery/``): ``begin_testing(m)`` after a reset or reboot validated makes the node
  ``testing``; it closes after ``m`` consecutive clean readings, without the dwell, and a triggering finding
  meanwhile fails the validation. ``recovery_failed()`` (and a failed validation) raises the incident's
  action to ``replace`` with the code ``RECOVERY_FAILED``: the node stays quarantined for a human.

* Deep diagnostics (``agent/diagnostics/runner.py``): ``begin_diagnostic()`` makes a node without an open
  incident ``testing`` until ``end_diagnostic()``; the marker is kept in memory only, so a restarted agent
  (whose run died with it) comes back out of ``testing``. An open incident always wins over it.

Alternating signals cannot flap: a streak needs consecutive readings to trigger, and a single bad reading
resets the clean streak, so bad/clean/bad/clean neither opens an incident nor closes one.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from pydantic import BaseModel, ConfigDict, Field

from core.debounce import DebounceConfig as DebounceConfig  # noqa: PLC0414 - re-exported: the machine's settings
from core.findings import Action, Finding, Status, Verdict, worst_action
from core.health import Incident, NodeHealth, NodeState
from core.plan_memory import RemediationMemory

log = structlog.get_logger(__name__)

STATE_SCHEMA_VERSION = 1
MANUAL_QUARANTINE = "MANUAL_QUARANTINE"
"""Reason code of an incident opened (or joined) by ``quarantine()``."""
RECOVERY_FAILED = "RECOVERY_FAILED"
"""Reason code joined to an incident whose reset, reboot or validation failed (action ``replace``)."""
ALL_CHECKS_PASSED = "AllChecksPassed"
NO_READING_YET = "NoReadingYet"
DIAGNOSTIC_RUNNING = "DiagnosticRunning"
"""Reason of a node ``testing`` while a deep diagnostic (``dcgmi diag``) runs on it."""
_MAX_MESSAGE = 240


class DebounceCounters(BaseModel):
    """The machine's memory between readings; every streak is capped at its threshold (steady = unchanged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bad_streaks: dict[str, int] = Field(default_factory=dict, description="Code -> consecutive bad readings.")
    clean_streak: int = Field(default=0, description="Consecutive clean readings while an incident is open.")
    calm_streak: int = Field(default=0, description="Consecutive readings without a held degraded finding.")
    unknown_streak: int = Field(default=0, description="Consecutive blind (unknown) readings.")
    clean_since: datetime | None = Field(
        default=None, description="First reading of the current clean run while an incident is open."
    )
    acknowledged: list[str] = Field(
        default_factory=list, description="Codes a human released while still bad; ignored until they clear."
    )
    quarantine_note: str | None = Field(default=None, description="Why a human quarantined the node.")
    degraded_findings: list[Finding] = Field(
        default_factory=list, description="The held findings behind the degraded state."
    )
    testing_readings: int | None = Field(
        default=None, description="While testing after a recovery: the clean readings that release the node."
    )


class AgentState(BaseModel):
    """Everything the agent persists on the node (``agent.state.store.StateStore``), schema version 1."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = STATE_SCHEMA_VERSION
    node: str
    health: NodeHealth
    counters: DebounceCounters = Field(default_factory=DebounceCounters)
    memory: RemediationMemory = Field(default_factory=RemediationMemory)


@dataclass
class _Reading:
    """One verdict sorted into what the rules need."""

    blind: bool
    bad: list[Finding] = field(default_factory=list)
    clean: bool = False
    unknown: list[Finding] = field(default_factory=list)


def default_incident_id(node: str, started_at: datetime) -> str:
    """``inc-<node>-<UTC start>-<16 hex>``: readable, sortable by time, unique across restarts, and not to be
    guessed by another node (64 random bits): an id is a node's claim on an incident."""
    return f"inc-{node}-{started_at:%Y%m%dT%H%M%SZ}-{secrets.token_hex(8)}"


def is_bad(finding: Finding) -> bool:
    """warn or fail: a finding that counts towards a streak."""
    return finding.status in (Status.WARN, Status.FAIL)


def is_clean(finding: Finding) -> bool:
    """ok, or a warn that recommends nothing: compatible with recovery."""
    return finding.status is Status.OK or (finding.status is Status.WARN and finding.action is Action.NONE)


def leading(findings: Iterable[Finding]) -> Finding | None:
    """The finding that names the state: worst status, then worst action, then code (deterministic)."""
    return min(findings, key=lambda f: (-f.status.rank, -f.action.rank, f.code, f.gpu or ""), default=None)


class HealthStateMachine:
    """Turns successive verdicts of one node into its debounced ``NodeHealth`` (no global state)."""

    def __init__(
        self,
        node: str,
        config: DebounceConfig,
        *,
        clock: Callable[[], datetime],
        initial: AgentState | None = None,
        new_incident_id: Callable[[str, datetime], str] | None = None,
    ) -> None:
        self._node = node
        self._config = config
        self._clock = clock
        self._new_incident_id = new_incident_id or default_incident_id
        self._log = log.bind(node=node)
        self._diagnostic: str | None = None
        if initial is not None and initial.node != node:
            self._log.warning("state_ignored_other_node", state_node=initial.node)
            initial = None
        if initial is None:
            self._health = NodeHealth(
                node=node,
                state=NodeState.UNKNOWN,
                since=clock(),
                reason=NO_READING_YET,
                message="no reading yet",
            )
            self._counters = DebounceCounters()
        else:
            self._health = initial.health
            self._counters = initial.counters

    @property
    def health(self) -> NodeHealth:
        """The current debounced health."""
        return self._health

    def export(self, memory: RemediationMemory) -> AgentState:
        """The state to persist: a machine built with ``initial=`` this continues exactly."""
        return AgentState(node=self._node, health=self._health, counters=self._counters, memory=memory)

    def observe(self, verdict: Verdict) -> NodeHealth:
        """Fold one verdict into the health (see the module docstring for the rules)."""
        now = self._clock()
        reading = _classify(verdict)
        if reading.blind:
            self._observe_blind(reading, now)
        else:
            self._observe_seen(reading, now)
        return self._health

    def quarantine(self, reason: str) -> NodeHealth:
        """Hold the node out of service by hand: an incident of action ``replace`` that never self-closes."""
        now = self._clock()
        incident = self._health.incident
        if incident is None:
            incident = Incident(
                id=self._new_incident_id(self._node, now),
                started_at=now,
                reasons=[MANUAL_QUARANTINE],
                action=Action.REPLACE,
            )
        else:
            incident = _join(incident, MANUAL_QUARANTINE, Action.REPLACE)
        self._counters = self._counters.model_copy(
            update={
                "quarantine_note": reason,
                "clean_streak": 0,
                "clean_since": None,
                "testing_readings": None,
            }
        )
        self._log.info("node_quarantined", incident=incident.id, reason=reason)
        self._set_health(incident, manual=True, now=now)
        return self._health

    def resume(self, incident: Incident, *, manual: bool, note: str | None) -> NodeHealth:
        """Continue an incident read back from the node after the state file was lost
        (``agent/state/resume.py``). One opened meanwhile (the node could not be read yet) joins it."""
        current = self._health.incident
        if current is not None and current.id != incident.id:
            for code in current.reasons:
                incident = _join(incident, code, current.action)
            gpus = [*incident.gpus, *(g for g in current.gpus if g not in incident.gpus)]
            incident = incident.model_copy(
                update={"gpus": gpus, "findings": [*current.findings, *incident.findings]}
            )
        update: dict[str, object] = {"clean_streak": 0, "clean_since": None, "testing_readings": None}
        if manual:
            update["quarantine_note"] = note
        self._counters = self._counters.model_copy(update=update)
        self._log.warning(
            "incident_resumed", incident=incident.id, action=incident.action.value, manual=manual
        )
        self._set_health(incident, manual=manual or self._health.manual_quarantine, now=self._clock())
        return self._health

    def release_by_human(self, reason: str) -> NodeHealth:
        """Close the open incident because a human said so; codes still bad wait until they clear once."""
        now = self._clock()
        incident = self._health.incident
        if incident is not None:
            still_bad = [code for code in incident.reasons if code in self._counters.bad_streaks]
            self._log.info("incident_released_by_human", incident=incident.id, reason=reason)
            self._counters = self._counters.model_copy(
                update={
                    "acknowledged": still_bad,
                    "clean_streak": 0,
                    "clean_since": None,
                    "quarantine_note": None,
                    "testing_readings": None,
                }
            )
        self._set_health(None, manual=False, now=now)
        return self._health

    def begin_testing(self, clean_readings: int) -> NodeHealth:
        """The open incident's GPUs were reset (or the node rebooted) and passed their diagnostic: the node
        is ``testing`` until ``clean_readings`` consecutive clean readings close the incident."""
        incident = self._health.incident
        if incident is None or incident.action is Action.REPLACE or self._health.manual_quarantine:
            return self._health
        self._counters = self._counters.model_copy(
            update={"testing_readings": max(clean_readings, 1), "clean_streak": 0, "clean_since": None}
        )
        self._log.info("incident_testing", incident=incident.id, clean_readings=clean_readings)
        self._set_health(incident, manual=False, now=self._clock())
        return self._health

    def begin_diagnostic(self, note: str) -> NodeHealth:
        """A deep diagnostic starts: a node without an open incident is ``testing`` until it ends. Kept in
        memory only, so an agent restarted mid-run comes back out of ``testing`` (the run died with it)."""
        self._diagnostic = note
        self._set_health(self._health.incident, manual=self._health.manual_quarantine, now=self._clock())
        return self._health

    def end_diagnostic(self) -> NodeHealth:
        """The deep diagnostic ended (or a leftover ``testing`` from before a restart): back to the state
        the readings say."""
        self._diagnostic = None
        self._set_health(self._health.incident, manual=self._health.manual_quarantine, now=self._clock())
        return self._health

    def recovery_failed(self, message: str) -> NodeHealth:
        """The reset, reboot or validation failed (or attempts ran out): escalate to ``replace``."""
        incident = self._health.incident
        if incident is None:
            return self._health
        self._counters = self._counters.model_copy(update={"testing_readings": None})
        self._log.warning("recovery_failed", incident=incident.id, detail=message)
        self._set_health(
            _escalated(incident, message), manual=self._health.manual_quarantine, now=self._clock()
        )
        return self._health

    # -- readings ---------------------------------------------------------------------------------------

    def _observe_blind(self, reading: _Reading, now: datetime) -> None:
        streak = min(self._counters.unknown_streak + 1, self._config.unknown_readings)
        self._counters = self._counters.model_copy(
            update={"unknown_streak": streak, "clean_streak": 0, "clean_since": None}
        )
        if self._health.incident is not None or streak < self._config.unknown_readings:
            return
        self._move_to(NodeState.UNKNOWN, now, _describe(leading(reading.unknown), "no answer from the GPUs"))

    def _observe_seen(self, reading: _Reading, now: datetime) -> None:
        streaks = self._update_streaks(reading.bad)
        acknowledged = [code for code in self._counters.acknowledged if code in streaks]
        self._counters = self._counters.model_copy(
            update={"bad_streaks": streaks, "unknown_streak": 0, "acknowledged": acknowledged}
        )
        triggered = [f for f in reading.bad if self._triggers(f)]
        incident = self._health.incident
        if triggered:
            incident = self._open_or_join(incident, triggered, now)
            if self._counters.testing_readings is not None:  # the fault is back while testing
                self._counters = self._counters.model_copy(update={"testing_readings": None})
                incident = _escalated(incident, f"validation failed: {triggered[0].code} while testing")
        elif incident is not None:
            incident = self._count_towards_recovery(incident, reading, now)
        self._update_degraded(reading)
        self._set_health(incident, manual=self._health.manual_quarantine, now=now)

    def _update_streaks(self, bad: list[Finding]) -> dict[str, int]:
        cap = self._config.polled_bad_readings
        previous = self._counters.bad_streaks
        return {code: min(previous.get(code, 0) + 1, cap) for code in sorted({f.code for f in bad})}

    def _triggers(self, finding: Finding) -> bool:
        if not finding.action.takes_node_out_of_service or finding.code in self._counters.acknowledged:
            return False
        if finding.check in self._config.immediate_checks:
            return True
        return self._counters.bad_streaks.get(finding.code, 0) >= self._config.polled_bad_readings

    def _open_or_join(self, incident: Incident | None, triggered: list[Finding], now: datetime) -> Incident:
        if incident is None:
            incident = Incident(
                id=self._new_incident_id(self._node, now),
                started_at=now,
                reasons=[],
                action=Action.NONE,
            )
            self._log.info("incident_opened", incident=incident.id, codes=[f.code for f in triggered])
        before = incident.action
        for finding in triggered:
            incident = _join(incident, finding.code, finding.action)
        gpus = list(incident.gpus)
        gpus.extend(f.gpu for f in triggered if f.gpu is not None and f.gpu not in gpus)
        failed = [f for f in incident.findings if f.code == RECOVERY_FAILED]  # keeps leading the incident
        incident = incident.model_copy(update={"gpus": gpus, "findings": [*failed, *triggered]})
        if incident.action is not before and before is not Action.NONE:
            self._log.info("incident_escalated", incident=incident.id, action=incident.action.value)
        self._counters = self._counters.model_copy(update={"clean_since": None, "clean_streak": 0})
        return incident

    def _count_towards_recovery(
        self, incident: Incident, reading: _Reading, now: datetime
    ) -> Incident | None:
        testing = self._counters.testing_readings
        cap = testing or self._config.clean_readings_to_recover
        if not reading.clean:
            self._counters = self._counters.model_copy(update={"clean_streak": 0, "clean_since": None})
            return incident
        streak = min(self._counters.clean_streak + 1, cap)
        since = self._counters.clean_since or now
        self._counters = self._counters.model_copy(update={"clean_streak": streak, "clean_since": since})
        if streak < cap or self._health.manual_quarantine or incident.action is Action.REPLACE:
            return incident
        # A validated recovery needs no dwell: the reset or reboot itself is why the readings are clean.
        if testing is None and (now - since).total_seconds() < self._config.min_dwell_s:
            return incident
        self._log.info("incident_closed", incident=incident.id, reasons=incident.reasons)
        self._counters = self._counters.model_copy(
            update={"clean_streak": 0, "clean_since": None, "testing_readings": None}
        )
        return None

    def _update_degraded(self, reading: _Reading) -> None:
        cap = self._config.polled_bad_readings
        held = [
            f
            for f in reading.bad
            if not f.action.takes_node_out_of_service and self._counters.bad_streaks.get(f.code, 0) >= cap
        ]
        if held:
            self._counters = self._counters.model_copy(update={"degraded_findings": held, "calm_streak": 0})
            return
        if not self._counters.degraded_findings:
            return  # nothing to count down: a healthy node's counters stay as they are
        calm = min(self._counters.calm_streak + 1, self._config.clean_readings_to_recover)
        update: dict[str, object] = {"calm_streak": calm}
        if calm >= self._config.clean_readings_to_recover:
            update = {"calm_streak": 0, "degraded_findings": []}
        self._counters = self._counters.model_copy(update=update)

    # -- health -----------------------------------------------------------------------------------------

    def _set_health(self, incident: Incident | None, *, manual: bool, now: datetime) -> None:
        manual = manual and incident is not None
        if incident is not None:
            state = (
                NodeState.QUARANTINED if manual or incident.action is Action.REPLACE else NodeState.UNHEALTHY
            )
            if state is NodeState.UNHEALTHY and self._counters.testing_readings is not None:
                state = NodeState.TESTING
            text = self._incident_text(incident, manual)
        elif self._diagnostic is not None:
            state, text = NodeState.TESTING, (DIAGNOSTIC_RUNNING, _shorten(self._diagnostic))
        elif self._counters.degraded_findings:
            state, text = NodeState.DEGRADED, _describe(leading(self._counters.degraded_findings), "")
        else:
            state, text = NodeState.HEALTHY, (ALL_CHECKS_PASSED, "all GPU health checks passed")
        self._move_to(state, now, text, incident=incident, manual=manual)

    def _incident_text(self, incident: Incident, manual: bool) -> tuple[str, str]:
        first = leading(incident.findings)
        if first is None or (manual and MANUAL_QUARANTINE in incident.reasons):
            note = self._counters.quarantine_note or "held out of service"
            return MANUAL_QUARANTINE, _shorten(f"quarantined by hand: {note}")
        more = len(incident.findings) - 1
        suffix = f" (+{more} more)" if more else ""
        return first.code, _shorten(f"{incident.action.value}: {first.message}{suffix}")

    def _move_to(
        self,
        state: NodeState,
        now: datetime,
        text: tuple[str, str],
        *,
        incident: Incident | None = None,
        manual: bool = False,
    ) -> None:
        since = self._health.since if state is self._health.state else now
        if state is not self._health.state:
            self._log.info("health_changed", state=state.value, previous=self._health.state.value)
        self._health = NodeHealth(
            node=self._node,
            state=state,
            since=since,
            incident=incident,
            reason=text[0],
            message=text[1],
            manual_quarantine=manual,
        )


def _classify(verdict: Verdict) -> _Reading:
    if verdict.status is Status.UNKNOWN:
        return _Reading(blind=True, unknown=[f for f in verdict.findings if f.status is Status.UNKNOWN])
    return _Reading(
        blind=False,
        bad=[f for f in verdict.findings if is_bad(f)],
        clean=all(is_clean(f) for f in verdict.findings),
    )


def _join(incident: Incident, code: str, action: Action) -> Incident:
    reasons = incident.reasons if code in incident.reasons else [*incident.reasons, code]
    return incident.model_copy(update={"reasons": reasons, "action": worst_action((incident.action, action))})


def _escalated(incident: Incident, message: str) -> Incident:
    """The incident raised to ``replace`` because its recovery failed; the failure leads its findings."""
    failure = Finding(
        check="recovery",
        gpu=None,
        status=Status.FAIL,
        code=RECOVERY_FAILED,
        message=message,
        action=Action.REPLACE,
    )
    joined = _join(incident, RECOVERY_FAILED, Action.REPLACE)
    return joined.model_copy(update={"findings": [failure, *incident.findings]})


def _describe(finding: Finding | None, fallback: str) -> tuple[str, str]:
    if finding is None:
        return "Unknown", fallback
    return finding.code, _shorten(finding.message)


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 1] + "…"
