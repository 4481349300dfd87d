"""Replay recorded fleet history through a candidate configuration, in simulated time (docs/replay.md).

Nothing here re-states a rule. Each node's recorded findings (the ``findings`` rows of the history, the
non-ok findings its agent reported each time they changed) are read again every reading interval by the
agent's own state machine (``HealthStateMachine``) under the candidate's debounce, XID actions re-judged by
``checks.xid.rejudge`` under the candidate's checks; the agent's planner (``plan``) decides under the node's
profile (``remediation/plan/profiles.py``); every permit goes through the agent's ``PermitGate`` to the
aggregator's own ``request_permit`` and circuit breaker on an in-memory database of the aggregator's schema,
with the candidate's budget, breaker and cooldown. Drains finish at the next reading, a reset or a reboot
clears the findings the history shows persisting (until the node's next recorded change), the node comes
back and validations pass: what the replay cannot know, it takes as going well.

Between changes a node is read only while something can still happen (an open incident, streaks not
settled); a settled node jumps to its next recorded change, so 30 days of 1,000 nodes take seconds.

Where the history cannot support an exact replay, the result says so (``gaps``): a node whose first row in
the window clears findings (something was bad before the window), rows held back by the aggregator's history
bound, findings rows of an older format (no findings). A findings row that arrived much later than its
agent read it (an outbox flushed after an aggregator outage) is **stale**: listed, never acted on.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from dataclasses import replace as replace_facts
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import create_engine, insert, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from agent.loop import unstarted_drains_forgotten
from agent.recovery.settle import settle_recovery
from agent.settings import AgentSettings
from agent.state.machine import HealthStateMachine
from agent.uplink.client import PermitLapsed, PermitRefused
from agent.uplink.permit_gate import PermitGate, split_at_first_permit, withhold_unpermitted
from aggregator import breaker, permits
from aggregator.settings import AggregatorSettings
from aggregator.store.common import record_event
from aggregator.store.tables import events, fleet_control, metadata, nodes
from checks.xid import rejudge
from core.aggregator_api import BAD_STATES, Event, Permit, PermitRequest
from core.clock import ManualClock
from core.findings import Action, Finding, Verdict
from core.health import NodeHealth
from core.plan_memory import RemediationMemory
from core.steps import ApplyReport, Cordon, Drain, NodeFacts, Reboot, Reset, SetTaint, Step, StepResult
from gpuhealth.replay.history import History, HistoryNode
from remediation.plan.planner import facts_after, plan
from remediation.plan.profiles import NodeGroup, ResolvedProfile, resolve
from remediation.plan.profiles import select as select_profile

DEFAULT_INTERVAL_S = 10.0
STALE_AFTER_INTERVALS = 3.0
"""A findings row that arrived this many reading intervals (and at least a minute) after its agent read it is
stale: the aggregator's own staleness rule for a node."""
COUNTED = ("taints", "cordons", "drains", "requeues", "resets", "reboots", "breaker_trips", "budget_refusals")
_DID_ACTIONS = {"taint": "taints", "cordon": "cordons", "drain": "drains", "requeue": "requeues"}
_DID_ACTIONS |= {"reset": "resets", "reboot": "reboots"}


class CandidateError(ValueError):
    """An invalid candidate configuration; one line naming the file and the field."""


@dataclass(frozen=True)
class Candidate:
    """What a replay runs: the agents' settings (checks, debounce, policy, recovery, profiles) and the
    aggregator's (budget, breaker, cooldown) under ``fleet:``."""

    agent: AgentSettings
    fleet: AggregatorSettings

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str) -> Candidate:
        # Only the fleet rules matter here (budget, breaker, cooldown); the service's identities do not.
        fleet = {"allow_anonymous": True, **(data.get("fleet") or {})}
        agent = {key: value for key, value in data.items() if key != "fleet"}
        try:
            agent_settings = AgentSettings(node_name="replay", **agent)
        except ValidationError as exc:
            raise CandidateError(f"{where}: {_first(exc)}") from None
        try:
            fleet_settings = AggregatorSettings(**fleet)
        except ValidationError as exc:
            raise CandidateError(f"{where}: fleet.{_first(exc)}") from None
        return cls(agent=agent_settings, fleet=fleet_settings)


def _first(exc: ValidationError) -> str:
    first = exc.errors()[0]
    cause = first.get("ctx", {}).get("error")
    if not first["loc"] and isinstance(cause, ValueError):
        return " ".join(str(cause).split())
    field_name = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{field_name}: {' '.join(str(first['msg']).split())}"


@dataclass
class Counts:
    """What was (or would have been) done; ``gpu_hours`` is GPU time out of service (tainted or cordoned)."""

    taints: int = 0
    cordons: int = 0
    drains: int = 0
    requeues: int = 0
    resets: int = 0
    reboots: int = 0
    breaker_trips: int = 0
    budget_refusals: int = 0
    gpu_hours: float = 0.0

    def add(self, other: Counts) -> None:
        for name in (*COUNTED, "gpu_hours"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, float | int]:
        values: dict[str, float | int] = {name: getattr(self, name) for name in COUNTED}
        values["gpu_hours"] = round(self.gpu_hours, 2)
        return values


@dataclass
class IncidentLine:
    """One incident as it went (``did``) or would have gone (``would``)."""

    node: str
    started_at: datetime
    reasons: list[str]
    steps: list[str] = field(default_factory=list)


@dataclass
class NodeResult:
    node: str
    profile: str
    would: Counts = field(default_factory=Counts)
    did: Counts = field(default_factory=Counts)
    would_incidents: list[IncidentLine] = field(default_factory=list)
    did_incidents: list[IncidentLine] = field(default_factory=list)
    shadow: Counts = field(default_factory=Counts)  # what the node's profile in shadow mode decided, recorded


@dataclass
class ReplayResult:
    since: datetime
    until: datetime
    nodes: list[NodeResult]
    would: Counts
    did: Counts
    shadow: Counts
    breaker_trips: list[str]
    gaps: list[str]
    stale: list[str]
    incidents: int

    def as_dict(self) -> dict[str, Any]:
        def incident(line: IncidentLine) -> dict[str, Any]:
            return {"started_at": line.started_at.isoformat(), "reasons": line.reasons, "steps": line.steps}

        return {
            "schema": "gpuhealth.replay/v1",
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "incidents": self.incidents,
            "totals": {
                "would": self.would.as_dict(),
                "did": self.did.as_dict(),
                "shadow": self.shadow.as_dict(),
            },
            "breaker_trips": self.breaker_trips,
            "gaps": self.gaps,
            "stale": self.stale,
            "nodes": [
                {
                    "node": n.node,
                    "profile": n.profile,
                    "would": n.would.as_dict(),
                    "did": n.did.as_dict(),
                    "shadow": n.shadow.as_dict(),
                    "would_incidents": [incident(line) for line in n.would_incidents],
                    "did_incidents": [incident(line) for line in n.did_incidents],
                }
                for n in self.nodes
                if n.would_incidents or n.did_incidents or n.would.as_dict() != Counts().as_dict()
            ],
        }


# --- the aggregator, in memory ---------------------------------------------------------------------------


class _LocalAggregator:
    """The permit calls of ``AggregatorClient`` answered by the aggregator's own functions on an in-memory
    database (what the ``PermitGate`` of each replayed node talks to)."""

    def __init__(self, fleet: list[HistoryNode], settings: AggregatorSettings, clock: ManualClock) -> None:
        self.settings = settings
        self.clock = clock
        self.engine: Engine = create_engine(
            "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
        metadata.create_all(self.engine)
        self.conn: Connection = self.engine.connect()
        far = clock.now() + timedelta(days=3650)
        start = clock.now()
        with self.conn.begin():
            self.conn.execute(insert(fleet_control).values(id=1, breaker_tripped=False))
            self.conn.execute(
                insert(nodes),
                [_node_row(node, start, far) for node in fleet],
            )

    def request_permit(
        self, node: str, action: Action, *, incident_id: str | None = None, ttl_s: float | None = None
    ) -> Permit:
        request = PermitRequest(node=node, action=action, incident_id=incident_id, ttl_s=ttl_s)
        with self.conn.begin():
            decision = permits.request_permit(self.conn, request, self.settings, self.clock.now())
        if decision.refusal is not None:
            refusal = decision.refusal
            raise PermitRefused(refusal.code, refusal.reason, refusal.retry_after_s)
        assert decision.permit is not None
        return decision.permit

    def renew_permit(self, permit_id: int, *, ttl_s: float | None = None) -> Permit:
        with self.conn.begin():
            try:
                return permits.renew_permit(self.conn, permit_id, ttl_s, self.settings, self.clock.now())
            except permits.PermitNotActive as exc:
                raise PermitLapsed(str(exc)) from exc

    def release_permit(self, permit_id: int) -> Permit:
        with self.conn.begin():
            return permits.release_permit(self.conn, permit_id, self.clock.now())

    def turned_bad(self, node: str, state: str) -> None:
        """What ingest does when a node turns unhealthy: a row the breaker counts, then the breaker."""
        now = self.clock.now()
        with self.conn.begin():
            self.conn.execute(nodes.update().where(nodes.c.name == node).values(state=state))
            record_event(
                self.conn, at=now, kind=breaker.TURNED_UNHEALTHY, node=node, message=f"turned {state}"
            )
            breaker.evaluate(self.conn, self.settings, now)

    def state(self, node: str, state: str) -> None:
        with self.conn.begin():
            self.conn.execute(nodes.update().where(nodes.c.name == node).values(state=state))

    def reset_breaker(self, by: str, at: datetime) -> None:
        with self.conn.begin():
            breaker.reset(self.conn, requested_by=by, reason="as recorded", now=at)

    def tally(self) -> tuple[list[str], Counter[str], Counter[tuple[str, str]]]:
        """Breaker trips (time and reason), refusals per node, and per (node, incident)."""
        trips = [
            f"{row.at.isoformat()}: {row.message}"
            for row in self.conn.execute(
                select(events.c.at, events.c.message)
                .where(events.c.kind == "breaker_tripped")
                .order_by(events.c.id)
            )
        ]
        refused: Counter[str] = Counter()
        by_incident: Counter[tuple[str, str]] = Counter()
        query = select(events.c.node, events.c.incident_id, events.c.details).where(
            events.c.kind == "permit_refused"
        )
        for row in self.conn.execute(query):
            if (row.details or {}).get("code") == "settling":
                continue  # a wait before the first permit, not capacity refused
            count = int(((row.details or {}).get("repeat") or {}).get("count", 1))
            refused[row.node or ""] += count
            by_incident[(row.node or "", row.incident_id or "")] += count
        return trips, refused, by_incident

    def close(self) -> None:
        self.conn.close()
        self.engine.dispose()


def _node_row(node: HistoryNode, start: datetime, far: datetime) -> dict[str, Any]:
    return {
        "name": node.name,
        "state": "healthy",
        "status": "ok",
        "action": "none",
        "orchestrator": node.orchestrator,
        "gpu_count": node.gpu_count,
        "interval_s": node.interval_s or DEFAULT_INTERVAL_S,
        "first_seen_at": start,
        "last_report_at": start,
        "stale_at": far,
        "last_seq": 0,
        "reports_accepted": 0,
        "labels": {},
        "gpus": [],
        "findings": [],
    }


# --- one node --------------------------------------------------------------------------------------------


@dataclass
class _Change:
    at: datetime
    findings: list[Finding] | None  # None: not a reading, a human's request (``request``)
    request: str | None = None  # "quarantine" or "release", as recorded


class _NodeSim:
    """One node: its recorded changes, the agent's state machine, planner memory and permit gate."""

    def __init__(  # noqa: PLR0917 - the node's parts, each named at the one call
        self,
        node: HistoryNode,
        changes: list[_Change],
        profile: ResolvedProfile,
        candidate: Candidate,
        clock: ManualClock,
        fleet: _LocalAggregator,
    ) -> None:
        self.node = node
        self.changes = changes
        self.profile = profile
        self.clock = clock
        self.fleet = fleet
        self.interval_s = node.interval_s or DEFAULT_INTERVAL_S
        self.machine = HealthStateMachine(
            node.name,
            profile.debounce,
            clock=clock.now,
            new_incident_id=lambda name, at: f"replay-{name}-{at.strftime('%Y%m%dT%H%M%SZ')}",
        )
        self.gate = PermitGate(
            node.name,
            cast("Any", fleet),
            clock=clock,
            retry_s=candidate.agent.aggregator.permit_retry_s,
        )
        recovery = candidate.agent.recovery
        if profile.recovery is not None:
            recovery = recovery.model_copy(update={"enabled": profile.recovery})
        self.rules = recovery.rules()
        self.memory = RemediationMemory()
        self.facts = NodeFacts(exists=True, boot_id="boot-0")
        self.next_change = 0
        self.findings: list[Finding] = []
        self.counts = Counts()
        self.incidents: list[IncidentLine] = []
        self._out_since: datetime | None = None
        self._drain_due: str | None = None
        self._boots = 0

    def first_time(self) -> datetime | None:
        return self.changes[0].at if self.changes else None

    def step(self, now: datetime) -> datetime | None:
        """One reading at ``now``; returns when the next reading is due (None: nothing more to read)."""
        while self.next_change < len(self.changes) and self.changes[self.next_change].at <= now:
            change = self.changes[self.next_change]
            self.next_change += 1
            if change.findings is not None:
                self.findings = change.findings
            elif change.request == "release":  # a human's release, as recorded: the machine's own rule
                self.machine.release_by_human("released by a human (recorded)")
            elif change.request == "quarantine":
                self.machine.quarantine("quarantined by a human (recorded)")
        self._background(now)
        before = (self.machine.export(self.memory), self.facts)
        previous = self.machine.health
        verdict = Verdict.from_findings(
            self.node.name, [rejudge(f, self.profile.checks) for f in self.findings]
        )
        health = self.machine.observe(verdict)
        self._after_health(previous, health)
        self.gate.observe_incident(health.incident.id if health.incident else None)
        planned = plan(health, self.facts, self.profile.policy, self.memory, recovery=self.rules, now=now)
        unguarded, guarded = split_at_first_permit(planned.steps)
        allowed, _notes = withhold_unpermitted(guarded, self.gate)
        applied = [*unguarded, *allowed]
        report = ApplyReport([StepResult(step, ok=True) for step in applied])
        memory = unstarted_drains_forgotten(planned.memory, self.memory, report, can_drain=True)
        if self.rules is not None:
            memory = settle_recovery(memory, report, self.machine, self.rules)
        self.memory = memory
        self._apply(applied, health, now)
        settled = before == (self.machine.export(self.memory), self.facts) and not applied
        return self._next_reading(now, settled, health)

    def _background(self, now: datetime) -> None:
        """What the executor would report since the last reading: the drain ended, the node came back."""
        if self._drain_due is not None:
            self.facts = replace_facts(self.facts, drain_finished_incident=self._drain_due)
            self._drain_due = None

    def _after_health(self, previous: NodeHealth, health: NodeHealth) -> None:
        if health.state in BAD_STATES and previous.state not in BAD_STATES:
            self.fleet.turned_bad(self.node.name, health.state.value)
        elif health.state != previous.state:
            self.fleet.state(self.node.name, health.state.value)
        incident = health.incident
        if incident is not None and (
            not self.incidents or self.incidents[-1].started_at != incident.started_at
        ):
            self.incidents.append(IncidentLine(self.node.name, incident.started_at, list(incident.reasons)))
        elif incident is not None:
            self.incidents[-1].reasons = list(incident.reasons)

    def _apply(self, steps: list[Step], health: NodeHealth, now: datetime) -> None:
        was_out = self._out_of_service()
        line = self.incidents[-1] if self.incidents and health.incident is not None else None
        for step in steps:
            name = self._count(step)
            if name and line is not None:
                line.steps.append(f"{name} {now.strftime('%Y-%m-%d %H:%M:%S')}")
        self.facts = facts_after(self.facts, steps)
        for step in steps:
            if isinstance(step, Drain):  # the drain cordons the node, as ours
                self.facts = replace_facts(self.facts, unschedulable=True, cordoned_by_us=True)
                self._drain_due = step.incident_id
            elif isinstance(step, Reboot):
                self._boots += 1
                self.facts = replace_facts(self.facts, boot_id=f"boot-{self._boots}")
            if isinstance(step, Reset | Reboot):
                # Taken as going well: the reset or reboot cleared what the history shows persisting
                # (there, nobody reset it); the node's next recorded change is read as recorded.
                self.findings = []
        out = self._out_of_service()
        if out and not was_out:
            self._out_since = now
        elif was_out and not out:
            self.close_out(now)

    def _count(self, step: Step) -> str | None:
        if isinstance(step, SetTaint) and self.facts.taint_value is None and step.value != "testing":
            self.counts.taints += 1
            return "taint"
        if isinstance(step, Cordon):
            self.counts.cordons += 1
            return "cordon"
        if isinstance(step, Drain):
            self.counts.drains += 1
            self.counts.requeues += 1  # the training job running there is requeued (the drain's requeue)
            return "drain"
        if isinstance(step, Reset):
            self.counts.resets += 1
            return "reset"
        if isinstance(step, Reboot):
            self.counts.reboots += 1
            return "reboot"
        return None

    def _out_of_service(self) -> bool:
        return self.facts.taint_value is not None or self.facts.unschedulable

    def close_out(self, now: datetime) -> None:
        if self._out_since is not None:
            hours = (now - self._out_since).total_seconds() / 3600.0
            self.counts.gpu_hours += hours * self.node.gpu_count
            self._out_since = None

    def _next_reading(self, now: datetime, settled: bool, health: NodeHealth) -> datetime | None:
        """When to read next; no later than when a refused permit may be granted (the agent's loop wakes
        then too: a settling node)."""
        following = self._following_reading(now, settled, health)
        soon = self.gate.wake_in()
        if soon is None:
            return following
        asked_again = now + timedelta(seconds=soon)
        return asked_again if following is None or asked_again < following else following

    def _following_reading(self, now: datetime, settled: bool, health: NodeHealth) -> datetime | None:
        upcoming = self.changes[self.next_change].at if self.next_change < len(self.changes) else None
        step = timedelta(seconds=self.interval_s)
        if not settled or self._drain_due is not None:
            return now + step
        incident = health.incident
        if incident is not None and not self.findings and incident.action is not Action.REPLACE:
            # clean readings while an incident is open: only the dwell is left to wait for
            counters = self.machine.export(self.memory).counters
            since = counters.clean_since or now
            due = since + timedelta(seconds=self.profile.debounce.min_dwell_s)
            wait = max(due, now + step)
            return wait if upcoming is None or wait < upcoming else upcoming
        return upcoming


# --- the replay ---------------------------------------------------------------------------------------------


def replay(history: History, candidate: Candidate) -> ReplayResult:
    """Run ``history`` through ``candidate``; the same input gives the same output."""
    clock = ManualClock(start=history.since)
    fleet = _LocalAggregator(history.nodes, candidate.fleet, clock)
    try:
        return _run(history, candidate, clock, fleet)
    finally:
        fleet.close()


def _run(history: History, candidate: Candidate, clock: ManualClock, fleet: _LocalAggregator) -> ReplayResult:
    gaps: list[str] = []
    stale: list[str] = []
    per_node = _changes(history, gaps, stale)
    sims: dict[str, _NodeSim] = {}
    heap: list[tuple[datetime, int, str]] = []
    for order, node in enumerate(sorted(history.nodes, key=lambda n: n.name)):
        profile = _profile_of(candidate, node)
        sim = _NodeSim(node, per_node.get(node.name, []), profile, candidate, clock, fleet)
        sims[node.name] = sim
        first = sim.first_time()
        if first is not None:
            heap.append((first, order, node.name))
    resets = sorted((event.at, event.message) for event in history.events if event.kind == "breaker_reset")
    heapq.heapify(heap)
    order_of = {name: order for order, name in enumerate(sorted(sims))}
    while heap:
        at, _order, name = heapq.heappop(heap)
        if at > history.until:
            break
        while resets and resets[0][0] <= at:
            reset_at, message = resets.pop(0)
            _advance(clock, reset_at)
            fleet.reset_breaker(message, reset_at)
        _advance(clock, at)
        following = sims[name].step(at)
        if following is not None and following <= history.until:
            heapq.heappush(heap, (following, order_of[name], name))
    _advance(clock, history.until)
    trips, refused, _by_incident = fleet.tally()
    return _result(history, sims, trips, refused, gaps, stale)


def _advance(clock: ManualClock, to: datetime) -> None:
    seconds = (to - clock.now()).total_seconds()
    if seconds > 0:
        clock.advance(seconds)


def _profile_of(candidate: Candidate, node: HistoryNode) -> ResolvedProfile:
    """The candidate's profile of the same name as the one the node ran (the history records the name, not
    the node's labels); else the candidate's default profile; else the base settings."""
    settings = candidate.agent
    if node.profile is not None and node.profile in settings.profiles.definitions:
        name: str | None = node.profile
    else:
        name = select_profile(settings.profiles, NodeGroup())
    return resolve(
        settings.profiles, name, checks=settings.checks, debounce=settings.debounce, policy=settings.policy
    )


def _changes(history: History, gaps: list[str], stale: list[str]) -> dict[str, list[_Change]]:
    """Each node's findings changes, in time order; stale rows and gaps noted."""
    intervals = {node.name: node.interval_s or DEFAULT_INTERVAL_S for node in history.nodes}
    changes: dict[str, list[_Change]] = defaultdict(list)
    limited: Counter[str] = Counter()
    old_format: Counter[str] = Counter()
    for event in history.events:
        if event.kind == "history_limited" and event.node:
            limited[event.node] += 1
        if event.kind in {"release_requested", "quarantine_requested"} and event.node in intervals:
            request = event.kind.removesuffix("_requested")
            changes[event.node].append(_Change(event.at, None, request))
            continue
        if event.kind != "findings" or event.node is None or event.node not in intervals:
            continue
        raw = event.details.get("findings")
        if not isinstance(raw, list):
            old_format[event.node] += 1
            continue
        read_at = _read_at(event)
        late = (event.at - read_at).total_seconds()
        if late > max(60.0, STALE_AFTER_INTERVALS * intervals[event.node]):
            stale.append(
                f"{event.node}: findings read at {read_at.isoformat()} arrived {late:.0f} s late "
                f"({', '.join(str(f.get('code')) for f in raw) or 'cleared'}): shown, not acted on"
            )
            continue
        findings = [Finding.model_validate(item) for item in raw]
        if not any(change.findings is not None for change in changes[event.node]) and not findings:
            gaps.append(
                f"{event.node}: findings cleared at {event.at.isoformat()} were raised before the window"
            )
        changes[event.node].append(_Change(event.at, findings))
    gaps.extend(
        f"{node}: {count} minute(s) of rows held back by the aggregator's history bound"
        for node, count in sorted(limited.items())
    )
    gaps.extend(
        f"{node}: {count} findings row(s) of an older format (no findings recorded)"
        for node, count in sorted(old_format.items())
    )
    return changes


def _read_at(event: Event) -> datetime:
    value = event.details.get("reported_at")
    if isinstance(value, str):
        try:
            read = datetime.fromisoformat(value)
        except ValueError:
            return event.at
        return read if read.tzinfo is not None else read.replace(tzinfo=event.at.tzinfo)
    return event.at


def _result(  # noqa: PLR0917 - the pieces of one result, from the one caller
    history: History,
    sims: dict[str, _NodeSim],
    trips: list[str],
    refused: Counter[str],
    gaps: list[str],
    stale: list[str],
) -> ReplayResult:
    did = _did(history)
    shadow = _shadow(history)
    results: list[NodeResult] = []
    would_total, did_total, shadow_total = Counts(), Counts(), Counts()
    for name in sorted(sims):
        sim = sims[name]
        sim.close_out(history.until)
        sim.counts.budget_refusals = refused.get(name, 0)
        node_did, did_lines = did.get(name, (Counts(), []))
        node_shadow = shadow.get(name, Counts())
        results.append(
            NodeResult(name, sim.profile.name, sim.counts, node_did, sim.incidents, did_lines, node_shadow)
        )
        would_total.add(sim.counts)
        did_total.add(node_did)
        shadow_total.add(node_shadow)
    would_total.breaker_trips = len(trips)
    did_total.breaker_trips = sum(1 for event in history.events if event.kind == "breaker_tripped")
    return ReplayResult(
        since=history.since,
        until=history.until,
        nodes=results,
        would=would_total,
        did=did_total,
        shadow=shadow_total,
        breaker_trips=trips,
        gaps=gaps,
        stale=stale,
        incidents=sum(len(sim.incidents) for sim in sims.values()),
    )


def _shadow(history: History) -> dict[str, Counts]:
    """What profiles in shadow mode decided and recorded (``gpuhealth events --shadow``), to set beside the
    replay of the same window: the two should agree where the shadow ran the candidate's profile."""
    out: dict[str, Counts] = defaultdict(Counts)
    for event in history.events:
        name = _DID_ACTIONS.get(str(event.details.get("action")))
        if event.kind == "shadow" and event.node is not None and name is not None:
            counts = out[event.node]
            setattr(counts, name, getattr(counts, name) + event.count)
            if name == "drains":
                counts.requeues += event.count
    return out


def _did(history: History) -> dict[str, tuple[Counts, list[IncidentLine]]]:
    """What the fleet did, from the recorded rows: actions that succeeded, refusals, incidents."""
    gpus = {node.name: node.gpu_count for node in history.nodes}
    out: dict[str, tuple[Counts, list[IncidentLine]]] = {}
    opened: dict[str, tuple[str, datetime]] = {}
    lines: dict[str, IncidentLine] = {}
    for event in history.events:
        if event.node is None or event.node not in gpus:
            continue
        counts, node_lines = out.setdefault(event.node, (Counts(), []))
        if event.kind == "incident_opened" and event.incident_id:
            opening = IncidentLine(event.node, event.at, [event.message])
            lines[event.incident_id] = opening
            node_lines.append(opening)
        elif event.kind == "action" and event.details.get("result") == "ok":
            name = _DID_ACTIONS.get(str(event.details.get("action")))
            if name is None:
                continue
            setattr(counts, name, getattr(counts, name) + event.count)
            line = lines.get(event.incident_id or "")
            if line is not None:
                line.steps.append(f"{name[:-1]} {event.at.strftime('%Y-%m-%d %H:%M:%S')}")
            if name in ("taints", "cordons") and event.node not in opened:
                opened[event.node] = (event.incident_id or "", event.at)
        elif event.kind == "permit_refused":
            counts.budget_refusals += event.count
        elif event.kind == "incident_closed" and event.node in opened:
            _incident, since = opened.pop(event.node)
            counts.gpu_hours += (event.at - since).total_seconds() / 3600.0 * gpus[event.node]
    for node, (_incident, since) in opened.items():
        out[node][0].gpu_hours += (history.until - since).total_seconds() / 3600.0 * gpus[node]
    return out


def hours(count: float) -> str:
    """GPU-hours for a table cell."""
    return f"{count:.1f}" if count < 1000 else f"{math.floor(count):,}"
