"""One node's agent loop: snapshot -> checks -> state machine -> plan -> apply -> persist -> metrics.

:class:`Agent` holds no global state: each has its own metrics registry, wake event and threads (named
after the node), so the demo and the benchmarks run hundreds of them in one process on fake GPUs. It is
built from parts, so tests inject a fake NVML, an emulated API server and a manual clock;
:func:`build_agent` (in ``agent/wiring.py``) wires the real ones.

Why the plan runs on every pass, not only when the verdict changes: the plan compares the desired node
state with what the executor's watch last saw, and returns nothing when they agree. Every pass is
therefore also a resync that repairs drift (our taint removed while the GPU is still bad), and a healthy,
unchanging node costs no API write at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import structlog

from agent.recovery.settle import settle_recovery
from agent.sources.wakeups import NodeChangeRelay, XidFeed
from agent.state.machine import HealthStateMachine
from agent.state.resume import LostState
from agent.state.store import StateStore, StateStoreError
from agent.telemetry.metrics import AgentMetrics
from agent.uplink.permit_gate import PermitGate, split_at_first_permit, withhold_unpermitted
from checks.config import ChecksConfig
from checks.runner import merge_findings, run_checks
from core.aggregator_api import DrainPhase
from core.clock import Clock, RealClock
from core.dcgm import DcgmReadings
from core.findings import Finding, Status, Verdict, with_unknown_ages
from core.health import NodeHealth
from core.snapshot import NodeSnapshot
from core.steps import (
    ApplyReport,
    Drain,
    EmitEvent,
    Requeue,
    SetDeviceTaints,
    SetTaint,
    Step,
    StepResult,
)
from remediation.executor.contract import NodeExecutor
from remediation.plan.planner import PlanResult, RemediationMemory, RemediationPolicy, plan
from remediation.plan.recovery import RecoveryRules
from remediation.plan.shadow import ShadowGate
from remediation.plan.shadow import describe as describe_shadow

if TYPE_CHECKING:
    from agent.diagnostics.runner import DiagnosticsRunner
    from agent.uplink.link import AggregatorLink

log = structlog.get_logger(__name__)

Waiter = Callable[[threading.Event, float], bool]
"""Waits on an event for at most ``timeout`` seconds; True when it was set (tests inject a fast one)."""

Applied = tuple[ApplyReport, tuple[Step, ...], list[str]]
"""What one pass applied: the executor's report, the steps sent, and the permit gate's notes."""

STOP_CHECK_S = 1.0  # the longest the loop waits before it looks at its stop event again


class SnapshotSource(Protocol):
    """Anything that reads one node snapshot and never raises for hardware trouble (``NvmlBackend``)."""

    def snapshot(self) -> NodeSnapshot: ...


class FindingSource(Protocol):
    """Findings beyond the checks' for a snapshot (fabric trends, the executor's trouble); never raises."""

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]: ...


class ReadingSource(Protocol):
    """DCGM readings for the snapshot (dcgm-exporter, dcgmi health): read, never judged here; never raises."""

    def read(self, snapshot: NodeSnapshot) -> DcgmReadings: ...


@dataclass(frozen=True)
class TickResult:
    """What one pass of the loop saw, decided and did."""

    snapshot: NodeSnapshot
    verdict: Verdict
    health: NodeHealth
    steps: tuple[Step, ...]
    report: ApplyReport
    seconds: float
    notes: tuple[str, ...] = ()


@dataclass
class AgentParts:
    """The collaborators of one :class:`Agent` (everything it does not own outright)."""

    source: SnapshotSource
    executor: NodeExecutor
    state_machine: HealthStateMachine
    policy: RemediationPolicy
    store: StateStore | None = None
    memory: RemediationMemory = field(default_factory=RemediationMemory)
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    feed: XidFeed | None = None
    wake: threading.Event = field(default_factory=threading.Event)
    link: AggregatorLink | None = None  # None: run without an aggregator
    permits: PermitGate | None = None  # None: nothing beyond mark + taint is ever permitted
    recovery: RecoveryRules | None = None  # None: no reset / reboot / validation (agent/recovery/)
    reading_sources: tuple[ReadingSource, ...] = ()  # dcgm-exporter, dcgmi: their readings join the snapshot
    finding_sources: tuple[
        FindingSource, ...
    ] = ()  # fabric trends, executor trouble: merged with the checks'
    diagnostics: DiagnosticsRunner | None = None  # None: no deep diagnostics (agent/diagnostics/runner.py)
    lost_state: LostState | None = None  # the state file was lost: read the incident back (state_recovery)
    shadow: ShadowGate | None = None  # a profile in shadow: what it does not write is recorded only


class Agent:
    """The per-node loop. Call :meth:`tick` for one pass, or :meth:`run` until a stop event is set."""

    def __init__(
        self,
        node: str,
        parts: AgentParts,
        *,
        interval_s: float = 10.0,
        dry_run: bool = False,
        clock: Clock | None = None,
        metrics: AgentMetrics | None = None,
        waiter: Waiter | None = None,
        closers: tuple[Callable[[], object], ...] = (),
    ) -> None:
        self.node = node
        self.parts = parts
        self.interval_s = interval_s
        self.dry_run = dry_run
        self.clock: Clock = clock or RealClock()
        self.metrics = metrics or AgentMetrics(node)
        self._waiter: Waiter = waiter or _event_wait
        self._closers = closers
        self._memory = parts.memory
        self._unknown_since: dict[tuple[str | None, str], datetime] = {}  # unknown findings, since when
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._relay: NodeChangeRelay | None = None
        self.ticks = 0
        self.tick_errors = 0
        self.last: TickResult | None = None
        self._log = log.bind(node=node)
        self._tainted_incident: str | None = None  # the incident whose fault-to-taint time is recorded
        self._ended_drain: tuple[str, str] | None = None  # (incident, phase) of the drain end last counted

    @property
    def wake(self) -> threading.Event:
        """Set it to make the loop run a pass now (XID callbacks and node changes do)."""
        return self.parts.wake

    @property
    def memory(self) -> RemediationMemory:
        """What the planner remembers of what we did to the node (persisted with the health)."""
        return self._memory

    # --- one pass ---------------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        """One pass, in the order of docs/architecture.md ("One agent tick"): read the node, judge it,
        debounce the verdict (with humans' requests), plan against the node as observed, act (mark and taint
        first, then what a permit allows), settle what happened (drain news, recovery, the state file), and
        publish (metrics, log, the aggregator's outbox). Deep diagnostics plug into judge, debounce and act.
        """
        started = time.perf_counter()
        snapshot = self._read_node()
        verdict = self._judge(snapshot)
        previous = self.parts.state_machine.health
        health = self._debounce(verdict, snapshot)
        if not self.dry_run and _incident_id(health) != _incident_id(previous):
            # Write-ahead: the incident is on disk before anything is done under its id (a taint, a permit),
            # so an agent killed mid-pass comes back to the same incident, never a second one.
            self._persist()
        planned = self._plan(health)
        report, steps, gate_notes = self._act(planned, health)
        if not self.dry_run:  # a dry run changes nothing, the state file included
            self._settle(planned.memory, report)
        seconds = time.perf_counter() - started
        notes = (*planned.notes, *gate_notes)
        result = TickResult(snapshot, verdict, health, steps, report, seconds, notes)
        self._publish(result, changed=previous != health)
        return result

    # --- the steps of one pass -------------------------------------------------------------------------

    def _judge(self, snapshot: NodeSnapshot) -> Verdict:
        """The checks' verdict (DCGM's readings in the snapshot included), with the findings of the other
        sources (fabric trends, the executor's trouble, a diagnostic that ended) merged in."""
        diagnostics = self.parts.diagnostics
        if diagnostics is not None:  # a dcgmi diag that ended: a failure's findings join this verdict
            diagnostics.settle(self.parts.state_machine)
        verdict = run_checks(snapshot, self.parts.checks)
        sources = (*self.parts.finding_sources, *((diagnostics,) if diagnostics is not None else ()))
        findings = verdict.findings
        if sources:
            extra = [
                f for source in sources for f in source.findings(snapshot)
            ]  # never raise, cache own polls
            findings = merge_findings(verdict.findings, extra)
        if not self._unknown_since and all(f.status is not Status.UNKNOWN for f in findings):
            return verdict if not sources else Verdict.from_findings(snapshot.node, findings)
        # an unknown reading carries its age (since when), shown everywhere: never taken for a fresh one
        stamped, self._unknown_since = with_unknown_ages(findings, self._unknown_since, self.clock.now())
        return Verdict.from_findings(snapshot.node, stamped)

    def _debounce(self, verdict: Verdict, snapshot: NodeSnapshot) -> NodeHealth:
        """The node's health after this verdict: humans' requests first (quarantine, release, diag), then
        the state machine; a diagnostic that is due or asked for makes the node ``testing`` here."""
        machine, diagnostics = self.parts.state_machine, self.parts.diagnostics
        self._resume_lost_incident()
        if self.parts.link is not None and not self.dry_run:
            self.parts.link.apply_requests(machine, diagnostics)
        health = machine.observe(verdict)
        if diagnostics is not None:
            health = diagnostics.prepare(machine, snapshot, dry_run=self.dry_run)
        return health

    def _resume_lost_incident(self) -> None:
        """The state file was lost: on the first pass that can read the node, continue the incident that
        its marks and the aggregator's record show, so no quarantine is lifted (agent/state/resume.py)."""
        lost = self.parts.lost_state
        if lost is None:
            return
        facts = self.parts.executor.facts()
        if not facts.exists:  # not readable yet: the planner changes nothing meanwhile either
            return
        resumed = lost.read_back(facts)
        if lost.finished:
            self.parts.lost_state = None
        if resumed is not None:
            self.parts.state_machine.resume(resumed.incident, manual=resumed.manual, note=resumed.note)
            self._memory = resumed.memory

    def _plan(self, health: NodeHealth) -> PlanResult:
        """What differs between the desired node and the node as the executor's watch last saw it."""
        facts = self.parts.executor.facts()
        if self.parts.shadow is not None:
            facts = self.parts.shadow.facts(facts)
        return plan(
            health, facts, self.parts.policy, self._memory, recovery=self.parts.recovery, now=self.clock.now()
        )

    def _act(self, planned: PlanResult, health: NodeHealth) -> Applied:
        """Apply the plan: mark and taint at once, then the steps a permit allows. Asking the aggregator for
        a permit (a network call that may be slow or time out) must never delay the taint that keeps new
        work off a faulty node. A diagnostic starts only once our taint is on."""
        steps, shadowed = self._shadow(planned.steps, health)
        unguarded, guarded = split_at_first_permit(steps)
        report = self._apply(unguarded)
        report.results[:0] = shadowed
        permitted, gate_notes = self._permitted(guarded, health)
        report.results.extend(self._apply(permitted).results)
        if self.parts.diagnostics is not None:
            self.parts.diagnostics.launch(self.parts.state_machine, report)
        return report, (*unguarded, *permitted), gate_notes

    def _shadow(self, planned: list[Step], health: NodeHealth) -> tuple[list[Step], list[StepResult]]:
        """The steps to write, and those a profile in shadow only records (with why: one line each)."""
        gate = self.parts.shadow
        if gate is None:
            return planned, []
        written, shadowed = gate.split(planned)
        now = self.clock.now()
        results = [
            StepResult(step, ok=True, detail=describe_shadow(step, self.node, now, health), shadow=True)
            for step in shadowed
        ]
        for result in results:
            self._log.info("shadow_decision", decision=result.detail)
        return written, results

    def _settle(self, memory: RemediationMemory, report: ApplyReport) -> None:
        """Keep what the planner learnt (recovery results folded in), add the background drain's news to
        the report, and save the state file when it changed."""
        self._remember(memory, report)
        report.results.extend(self._drain_news())
        self._count_drain_end()
        self._persist()

    def _publish(self, result: TickResult, *, changed: bool) -> None:
        """Metrics, one log line, and the report queued for the aggregator (a dry run reports too: it plans
        and reports, mutating nothing)."""
        self.metrics.record_tick(
            result.snapshot, result.verdict, result.report, seconds=result.seconds, dry_run=self.dry_run
        )
        self._record_taint_latency(result)
        self._log_tick(result, changed=changed)
        diagnostics = self.parts.diagnostics
        diag_news = diagnostics.news() if diagnostics is not None else []  # logged by the runner too
        if self.parts.link is not None:
            self.parts.link.note(diag_news)
            self.parts.link.observe(result, dry_run=self.dry_run)  # queued on disk; a thread sends it
        self.ticks += 1
        self.last = result

    def _apply(self, steps: Sequence[Step]) -> ApplyReport:
        return self.parts.executor.apply(steps, dry_run=self.dry_run) if steps else ApplyReport()

    def _permitted(self, planned: list[Step], health: NodeHealth) -> tuple[tuple[Step, ...], list[str]]:
        """The planned steps less those a missing permit withholds; releases a permit whose incident ended."""
        gate = self.parts.permits
        if gate is not None and not self.dry_run:
            gate.observe_incident(health.incident.id if health.incident else None)
            self._keep_drain_permit(gate, health)
        steps, notes = withhold_unpermitted(planned, gate)
        return tuple(steps), notes

    def _drain_news(self) -> list[StepResult]:
        """The background drain's outcome and requeue since the last pass, as results for the timeline."""
        executor = self.parts.executor
        deadline_s = self.parts.policy.drain_deadline_s
        return [
            StepResult(
                step=Requeue(news.incident_id) if news.requeue else Drain(news.incident_id, deadline_s),
                ok=news.ok,
                detail=news.detail,
                attempts=0,
            )
            for news in executor.drain_updates()
        ]

    def _count_drain_end(self) -> None:
        """Count each drain once when it ends, by how it ended (the metric behind "drains blocked")."""
        state = self.parts.executor.drain_state
        if state is None or state.phase == DrainPhase.RUNNING:
            return
        ended = (state.incident_id, str(state.phase))
        if ended != self._ended_drain:
            self._ended_drain = ended
            self.metrics.record_drain_end(ended[1])

    def _record_taint_latency(self, result: TickResult) -> None:
        """The first time our taint goes on for an incident, how long after the fault's first reading."""
        incident = result.health.incident
        if incident is None or incident.id == self._tainted_incident or self.dry_run:
            return
        if any(isinstance(r.step, SetTaint | SetDeviceTaints) and r.ok for r in result.report.results):
            self._tainted_incident = incident.id
            self.metrics.record_taint((self.clock.now() - incident.started_at).total_seconds())

    def _keep_drain_permit(self, gate: PermitGate, health: NodeHealth) -> None:
        """While our drain of this incident runs, keep its permit renewed (the gate renews when asked)."""
        incident = health.incident
        held = gate.held
        if incident is None or held is None or held.incident_id != incident.id:
            return
        state = self.parts.executor.drain_state
        if state is not None and state.incident_id == incident.id and state.phase == DrainPhase.RUNNING:
            gate.acquire("drain", incident.id)

    def _read_node(self) -> NodeSnapshot:
        """This pass's snapshot, with the kernel log's XIDs merged in; a backend bug reads as unknown."""
        feed = self.parts.feed
        if feed is not None:
            feed.ensure_watching()
        try:
            snapshot = self.parts.source.snapshot()
        except Exception as exc:  # noqa: BLE001 - the backend never raises by contract; a bug must read as unknown
            self._log.exception("snapshot_failed")
            snapshot = NodeSnapshot(
                node=self.node,
                taken_at=self.clock.now(),
                nvml_error=f"snapshot failed: {type(exc).__name__}: {exc}",
                gpus=[],
            )
        if feed is not None:
            snapshot = feed.merge_kernel_events(snapshot)
        return self._with_dcgm(snapshot)

    def _with_dcgm(self, snapshot: NodeSnapshot) -> NodeSnapshot:
        """The DCGM sources' readings join the snapshot (judged by the checks like NVML's)."""
        sources = self.parts.reading_sources
        if not sources:
            return snapshot
        readings = DcgmReadings()
        for source in sources:
            readings = readings.joined(source.read(snapshot))
        return snapshot.model_copy(update={"dcgm": readings})

    def _remember(self, memory: RemediationMemory, report: ApplyReport) -> None:
        """Keep the planner's new memory, except what it assumed about Events that failed to go out and
        drains that did not start (no permit, API server down): those are planned again."""
        kept = _unsent_events_forgotten(memory, report)
        can_drain = self.parts.executor.can_drain
        self._memory = unstarted_drains_forgotten(kept, self._memory, report, can_drain=can_drain)
        if self.parts.recovery is not None:  # reset / reboot / validation results: testing or escalation
            machine, rules = self.parts.state_machine, self.parts.recovery
            self._memory = settle_recovery(self._memory, report, machine, rules)

    def _persist(self) -> None:
        if self.parts.store is None:
            return
        try:
            self.parts.store.save(self.parts.state_machine.export(self._memory))
        except StateStoreError as exc:  # the node is still marked; only a restart would lose the incident
            self._log.error("state_save_failed", error=str(exc))

    def _log_tick(self, result: TickResult, *, changed: bool) -> None:
        fields = {
            "state": result.health.state.value,
            "reason": result.health.reason,
            "incident": result.health.incident.id if result.health.incident else None,
            "steps": [type(step).__name__ for step in result.steps],
            "writes": result.report.writes,
            "failed": [type(r.step).__name__ for r in result.report.results if not r.ok],
            "dry_run": self.dry_run,
            "seconds": round(result.seconds, 4),
        }
        if changed or result.steps:
            self._log.info("tick", **fields)
        else:
            self._log.debug("tick", **fields)

    # --- the loop --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Tick every ``interval_s``, at once on an XID or a change on the node, until ``stop`` is set.

        An exception in a pass is logged and counted; it never ends the loop.
        """
        stop_event = stop or self._stop
        self._start_sources()
        try:
            while not (stop_event.is_set() or self._stop.is_set()):
                self.parts.wake.clear()
                self._guarded_tick()
                self._wait_for_next(stop_event)
        finally:
            self._stop_sources()

    def start(self) -> Agent:
        """Run the loop on a thread named after the node; returns self."""
        self._thread = threading.Thread(target=self.run, name=f"gpuhealth-agent:{self.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end, wait for it, then close the executor and what the agent owns."""
        self._stop.set()
        self.parts.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.close()

    def close(self) -> None:
        """Close the executor and the other resources handed over at construction (idempotent)."""
        self._stop_sources()
        diagnostics = self.parts.diagnostics  # a dcgmi diag still running must not outlive the agent
        stop_diagnostics = (diagnostics.close,) if diagnostics is not None else ()
        for closer in (*stop_diagnostics, self.parts.executor.close, *self._closers):
            try:
                closer()
            except Exception:  # noqa: BLE001 - closing one must not keep the others open
                self._log.exception("close_failed")
        self._closers = ()

    @property
    def alive(self) -> bool:
        """Whether the loop thread is running (True when the loop runs on the caller's thread)."""
        return self._thread is None or self._thread.is_alive()

    @property
    def ready(self) -> bool:
        """A first pass is done and the executor's view of the node is synced."""
        return self.ticks > 0 and self.parts.executor.synced

    def _guarded_tick(self) -> None:
        try:
            self.tick()
        except Exception:  # noqa: BLE001 - one bad pass (a bug, a dead disk) must not end the agent
            self.tick_errors += 1
            self.metrics.record_tick_error()
            self._log.exception("tick_failed")

    def _wait_for_next(self, stop: threading.Event) -> None:
        due = self.clock.monotonic() + self.next_wait_s()
        while not (stop.is_set() or self._stop.is_set()):
            remaining = due - self.clock.monotonic()
            if remaining <= 0:
                return
            if self._waiter(self.parts.wake, min(remaining, STOP_CHECK_S)):
                return

    def next_wait_s(self) -> float:
        """The polling interval, or less when a permit may be granted sooner (the aggregator said when)."""
        gate = self.parts.permits
        soon = gate.wake_in() if gate is not None else None
        return self.interval_s if soon is None else min(self.interval_s, soon)

    def _start_sources(self) -> None:
        if self.parts.feed is not None:
            self.parts.feed.start()
        if self.parts.link is not None:
            self.parts.link.start()
        if self._relay is None:
            self._relay = NodeChangeRelay(
                self.parts.executor, self.parts.wake, name=f"gpuhealth-node-watch:{self.node}"
            )
            self._relay.start()

    def _stop_sources(self) -> None:
        if self.parts.feed is not None:
            self.parts.feed.stop()
        if self.parts.link is not None:
            self.parts.link.stop()
        if self._relay is not None:
            self._relay.stop()
            self._relay = None


def _event_wait(event: threading.Event, timeout: float) -> bool:
    return event.wait(timeout)


def _unsent_events_forgotten(memory: RemediationMemory, report: ApplyReport) -> RemediationMemory:
    """The planner remembers an Event as sent when it plans it. When one failed (API down), forget its key,
    so the next pass plans it again rather than an outage swallowing it (the planner derives Events from
    their keys alone). Only that: what the planner learnt about humans must stay, or a human's uncordon
    could be undone. Safe against duplicates: the executor names an Event by its key, so a retry of one
    the server did record answers AlreadyExists.
    """
    failed = {r.step.key for r in report.results if isinstance(r.step, EmitEvent) and not r.ok}
    if not failed:
        return memory
    kept = tuple(key for key in memory.emitted_events if key not in failed)
    return memory.model_copy(update={"emitted_events": kept})


def unstarted_drains_forgotten(
    memory: RemediationMemory, previous: RemediationMemory, report: ApplyReport, *, can_drain: bool
) -> RemediationMemory:
    """The planner remembers a drain as started when it plans it. When it did not start — no permit let it
    through (absent from the report), or the executor skipped it (API server down) — forget it, so a later
    pass tries again. An executor that cannot drain at all keeps it remembered: asking again on every pass
    would only repeat the refusal in the timeline."""
    settled = {
        r.step.incident_id for r in report.results if isinstance(r.step, Drain) and (r.ok or not can_drain)
    }
    unstarted = set(memory.drained) - set(previous.drained) - settled
    if not unstarted:
        return memory
    kept = tuple(incident for incident in memory.drained if incident not in unstarted)
    return memory.model_copy(update={"drained": kept})


def _incident_id(health: NodeHealth) -> str | None:
    return health.incident.id if health.incident is not None else None
