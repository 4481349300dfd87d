"""Deep diagnostics: ``dcgmi diag`` on a schedule (idle, healthy nodes only) and when a human asks.

The loop drives a :class:`DiagnosticsRunner` in four places of a pass, so the run never blocks it:

1. :meth:`~DiagnosticsRunner.settle` (first): a run that finished since the last pass is settled; a failed
   run's ``DCGM_DIAG_<TEST>`` findings join this very pass's verdict (the runner is also a finding source),
   and ``testing`` ends only after the state machine saw them, so the node goes from ``testing`` straight to
   an incident and its taint is never lifted in between.
2. :meth:`~DiagnosticsRunner.prepare` (after the state machine): a run that is due (schedule) or asked for
   (``gpuhealth diag``, through the aggregator link) starts when its rules allow — scheduled: the node is
   healthy and, with ``only_when_idle``, no unfinished pod (Nomad: live allocation) on it holds GPUs (one
   list, only now);
   on demand: the node is idle or the human said ``--force``. A refusal is a timeline entry with the reason;
   a skipped scheduled run is tried again ``busy_retry_s`` later. Starting makes the node ``testing``, so the
   plan of this pass labels it and taints it ``gpuhealth.io/unhealthy=testing:NoSchedule``.
3. :meth:`~DiagnosticsRunner.launch` (after the executor applied the plan): ``dcgmi diag`` starts on its own
   thread only once the taint went on; if it could not be set, the run is called off.
4. :meth:`~DiagnosticsRunner.news`: start, outcome (passed or failed, per-test summary, duration) and
   refusals, for the report's timeline.

A restarted agent never leaves the node ``testing``: the state machine keeps the marker in memory only, and
the runner's own file (``agent/diagnostics/state.py``) remembers the run that died with the old process, so
the timeline says it was interrupted. A failed run's findings are held while the incident they opened is
open (not while it is being validated after a repair, nor after a human released it): a diagnostic is not
re-polled, so its verdict must not fade after a few clean readings.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import structlog

from agent.backends.dcgm.dcgmi import DcgmiError, DcgmiProcesses, DiagRun
from agent.diagnostics.order import DiagOrder
from agent.diagnostics.settings import DiagnosticsSettings
from agent.diagnostics.state import DiagnosticsState, DiagnosticsStore, RunningDiag
from agent.state.machine import HealthStateMachine
from checks.dcgmi import diag_findings
from core.aggregator_api import DIAG_OUTPUT_MAX_BYTES, ActionTaken
from core.clock import Clock
from core.findings import Finding
from core.health import NodeHealth, NodeState
from core.redaction import redact_text, tail
from core.snapshot import NodeSnapshot
from core.steps import ApplyReport, SetTaint

log = structlog.get_logger(__name__)

ACTION = "diag"
"""The timeline's name for everything deep diagnostics do (``action`` events)."""
_MAX_MESSAGE = 1000

DiagFunction = Callable[[int, float], DiagRun]
"""Runs ``dcgmi diag -r LEVEL`` within a timeout (``agent.backends.dcgm.dcgmi.run_diag`` bound to a path)."""


@runtime_checkable
class IdleProbe(Protocol):
    """Says which unfinished workloads on the node hold GPUs (the Kubernetes executor: pods; the Nomad one:
    allocations); raises when it cannot. ``gpu_workload`` names them for the "busy" message."""

    gpu_workload: str

    def gpu_pods(self) -> list[str]: ...


@dataclass
class _Run:
    """A run on its way: prepared (waiting for the taint), then running on its thread, then done."""

    order: DiagOrder
    uuids: Mapping[int, str]
    started_at: datetime
    thread: threading.Thread | None = None
    outcome: DiagRun | str | None = None  # str: why it could not run

    @property
    def done(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()


class DiagnosticsRunner:
    """Deep diagnostics of one node; see the module docstring for the rules. Thread-safe :meth:`request`."""

    def __init__(
        self,
        node: str,
        settings: DiagnosticsSettings,
        *,
        clock: Clock,
        diag: DiagFunction,
        probe: IdleProbe | None,
        store: DiagnosticsStore | None = None,
        wake: threading.Event | None = None,
        processes: DcgmiProcesses | None = None,
    ) -> None:
        self.node = node
        self._processes = processes  # what ``diag`` runs dcgmi through; close() ends a run in progress
        self.settings = settings
        self._clock = clock
        self._diag = diag
        self._probe = probe
        self._store = store
        self._wake = wake
        self._lock = threading.Lock()
        self._orders: list[DiagOrder] = []
        self._run: _Run | None = None
        self._ended = False  # a run ended (or a restart left testing): leave testing after this verdict
        self._notes: list[ActionTaken] = []
        self._log = log.bind(node=node)
        self._state = store.load() if store is not None else DiagnosticsState()
        self._resume()

    # --- inputs -----------------------------------------------------------------------------------------

    def request(self, order: DiagOrder) -> None:
        """Queue a human's run (from the aggregator link); the next pass decides whether it may start."""
        if not self.settings.on_demand:
            self._note("skipped", f"{order.describe()} refused: on-demand diagnostics are off on this node")
            return
        with self._lock:
            self._orders.append(order)

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]:
        """A failed run's findings while the incident they opened is open (a finding source; never raises)."""
        return list(self._state.failed_findings)

    @property
    def running(self) -> bool:
        """A run is prepared or in progress."""
        return self._run is not None

    @property
    def next_due_at(self) -> datetime | None:
        """When the scheduled run is next due (None: schedule off)."""
        return self._state.next_due_at

    def news(self) -> list[ActionTaken]:
        """Timeline entries since the last call (start, outcome, refusals), each once."""
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def wait(self, timeout_s: float) -> bool:
        """Wait for a running diagnostic's thread to end (tests, shutdown); True when none runs."""
        run = self._run
        if run is None or run.thread is None:
            return True
        run.thread.join(timeout_s)
        return not run.thread.is_alive()

    def close(self, timeout_s: float = 5.0) -> None:
        """Agent shutdown: end a ``dcgmi diag`` still running (its process group) and wait for its thread.
        The run stays recorded as running, so the next start says it was interrupted."""
        if self._processes is not None:
            self._processes.stop()
        self.wait(timeout_s)

    # --- the loop's side ----------------------------------------------------------------------------------

    def settle(self, machine: HealthStateMachine) -> None:
        """Before the verdict: settle a finished run (a failure's findings join this verdict), drop held
        findings whose incident is over, and notice a ``testing`` no run stands behind (left by a restart);
        :meth:`prepare` ends ``testing`` once the state machine has seen the verdict."""
        run = self._run
        if run is not None and run.done:
            self._run = None
            self._finish(run)
            self._ended = True  # ended after the state machine saw the findings: testing -> incident
        elif run is None and _diagnostic_testing(machine.health):
            self._ended = True
        self._release_held_findings(machine.health)

    def prepare(self, machine: HealthStateMachine, snapshot: NodeSnapshot, *, dry_run: bool) -> NodeHealth:
        """After the state machine: start the run that is due or asked for, if its rules allow; returns
        the node's health (``testing`` once a run starts on a node without an incident)."""
        if self._ended:
            self._ended = False
            machine.end_diagnostic()
        self._bind_held_findings(machine.health)
        if self._run is not None:
            return machine.health
        order = self._next_order()
        if order is None:
            return machine.health
        refusal = self._refusal(order, machine.health, dry_run=dry_run)
        if refusal is not None:
            self._refuse(order, refusal)
            return machine.health
        uuids = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
        self._run = _Run(order=order, uuids=uuids, started_at=self._clock.now())
        if order.scheduled:
            self._update(next_due_at=self._clock.now() + timedelta(seconds=self.settings.every_s))
        self._log.info("diagnostic_prepared", level=order.level, requested_by=order.requested_by)
        return machine.begin_diagnostic(f"{order.describe()} running")

    def launch(self, machine: HealthStateMachine, report: ApplyReport) -> None:
        """After the plan was applied: start ``dcgmi diag`` once our taint is on, or call the run off."""
        run = self._run
        if run is None or run.thread is not None:
            return
        failed = [r.detail for r in report.results if isinstance(r.step, SetTaint) and not r.ok]
        if failed:
            self._run = None
            machine.end_diagnostic()
            self._note("failed", f"{run.order.describe()} not started: could not taint the node: {failed[0]}")
            return
        run.thread = threading.Thread(
            target=self._work, args=(run,), name=f"gpuhealth-diag:{self.node}", daemon=True
        )
        self._update(
            running=RunningDiag(
                level=run.order.level, started_at=run.started_at, requested_by=run.order.requested_by
            )
        )
        self._note("ok", f"{run.order.describe()} started")
        run.thread.start()

    # --- rules --------------------------------------------------------------------------------------------

    def _next_order(self) -> DiagOrder | None:
        with self._lock:
            if self._orders:
                return self._orders.pop(0)
        due = self._state.next_due_at
        if self.settings.enabled and due is not None and self._clock.now() >= due:
            return DiagOrder(level=self.settings.level)
        return None

    def _refusal(self, order: DiagOrder, health: NodeHealth, *, dry_run: bool) -> str | None:
        """Why the order may not start now, or None."""
        if dry_run:
            return "dry run: diagnostics are not run"
        if order.scheduled and health.state is not NodeState.HEALTHY:
            return f"the node is {health.state.value}"
        if order.force or (order.scheduled and not self.settings.only_when_idle):
            return None
        return self._busy()

    def _busy(self) -> str | None:
        """None when no pod on the node holds GPUs; otherwise why it is not known to be idle."""
        if self._probe is None:
            return "cannot tell whether pods use the GPUs on this orchestrator (use --force)"
        try:
            pods = self._probe.gpu_pods()
        except Exception as exc:  # noqa: BLE001 - any failure to tell means "not known to be idle"
            return f"cannot tell whether pods use the GPUs: {exc}"
        if not pods:
            return None
        noun = self._probe.gpu_workload
        listed = ", ".join(pods[:5]) + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")
        return f"busy: {len(pods)} {noun}(s) use the GPUs: {listed}"

    def _refuse(self, order: DiagOrder, reason: str) -> None:
        if order.scheduled:
            retry = self._clock.now() + timedelta(seconds=self.settings.busy_retry_s)
            self._update(next_due_at=retry)
            self._log.info("diagnostic_skipped", reason=reason, retry_at=retry.isoformat())
            self._note("skipped", f"{order.describe()} skipped: {reason}; next try {retry:%Y-%m-%dT%H:%M}Z")
            return
        hint = "" if order.force or not reason.startswith("busy") else " (use --force to run anyway)"
        self._log.info("diagnostic_refused", reason=reason, request=order.request_id)
        self._note("skipped", f"{order.describe()} refused: {reason}{hint}")

    # --- the run ------------------------------------------------------------------------------------------

    def _work(self, run: _Run) -> None:
        try:
            run.outcome = self._diag(run.order.level, self.settings.timeout_s)
        except DcgmiError as exc:
            run.outcome = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must end the run, never leave the node testing
            self._log.exception("diagnostic_crashed")
            run.outcome = f"internal error: {type(exc).__name__}"
        finally:
            if self._wake is not None:  # the loop settles the outcome at once, not at its next interval
                self._wake.set()

    def _finish(self, run: _Run) -> None:
        outcome = run.outcome
        what = run.order.describe()
        if isinstance(outcome, DiagRun):
            summary = diag_summary(outcome)
            output = diag_output(outcome)
            if outcome.passed:
                self._update(running=None, failed_findings=[], failed_incident=None)
                self._note("ok", f"{what} passed in {outcome.seconds:.0f} s: {summary}", output=output)
            else:
                found = diag_findings(outcome.result, run.uuids)
                self._update(running=None, failed_findings=found, failed_incident=None)
                self._note("failed", f"{what} failed in {outcome.seconds:.0f} s: {summary}", output=output)
            self._log.info("diagnostic_finished", passed=outcome.passed, seconds=round(outcome.seconds, 1))
            return
        # dcgmi missing, hung or unreadable: DCGM trouble, not a GPU fault, so no finding.
        self._update(running=None)
        self._log.warning("diagnostic_not_run", error=outcome)
        self._note("failed", f"{what} could not run: {outcome}")

    # --- held findings ------------------------------------------------------------------------------------

    def _bind_held_findings(self, health: NodeHealth) -> None:
        """The pass after a failure: tie its findings to the incident they opened, or drop them."""
        if not self._state.failed_findings or self._state.failed_incident is not None:
            return
        if health.incident is None:  # warnings only: nothing to hold the node for
            self._update(failed_findings=[])
        else:
            self._update(failed_incident=health.incident.id)

    def _release_held_findings(self, health: NodeHealth) -> None:
        held_for = self._state.failed_incident
        if held_for is None:
            return
        incident = health.incident
        if incident is None or incident.id != held_for or health.state is NodeState.TESTING:
            self._log.info("diagnostic_findings_released", incident=held_for)
            self._update(failed_findings=[], failed_incident=None)

    # --- state --------------------------------------------------------------------------------------------

    def _resume(self) -> None:
        running = self._state.running
        if running is not None:
            self._note(
                "failed",
                f"dcgmi diag level {running.level} (started {running.started_at:%Y-%m-%dT%H:%M:%S}Z by "
                f"{running.requested_by}) was interrupted by an agent restart; not resumed",
            )
            self._update(running=None)
        if self.settings.enabled and self._state.next_due_at is None:
            # Spread the fleet over the period: nodes rolled out together do not all test at once.
            self._update(
                next_due_at=self._clock.now() + timedelta(seconds=spread_s(self.node, self.settings))
            )
        elif not self.settings.enabled and self._state.next_due_at is not None:
            self._update(next_due_at=None)

    def _update(self, **changes: object) -> None:
        self._state = self._state.model_copy(update=changes)
        if self._store is not None:
            self._store.save(self._state)

    def _note(self, result: str, message: str, *, output: str | None = None) -> None:
        entry = ActionTaken.model_validate(
            {
                "at": self._clock.now(),
                "action": ACTION,
                "result": result,
                "message": message[:_MAX_MESSAGE],
                "output": output,
            }
        )
        with self._lock:
            self._notes.append(entry)


def diag_summary(run: DiagRun) -> str:
    """``memory fail, pcie pass, ...``: each test with its worst grade, failures first."""
    order = {"fail": 0, "warn": 1, "skip": 2, "pass": 3}
    graded = [(test.name, test.grade.value if test.grade else "no result") for test in run.result.tests]
    graded.sort(key=lambda item: order.get(item[1], 4))
    return ", ".join(f"{name} {grade}" for name, grade in graded) or "no test ran"


def diag_output(run: DiagRun) -> str | None:
    """What the report carries of ``dcgmi diag``'s raw output, the evidence for a hardware return: its last
    64 KiB (the results come last), secret-looking values redacted; None when dcgmi printed nothing."""
    if not run.output.strip():
        return None
    return tail(redact_text(run.output), DIAG_OUTPUT_MAX_BYTES)  # redacted whole: no cut secret shows


def spread_s(node: str, settings: DiagnosticsSettings) -> float:
    """A stable per-node offset within one period, so first runs spread over the fleet."""
    digest = int.from_bytes(hashlib.sha256(node.encode()).digest()[:8], "big")
    return float(digest % max(int(settings.every_s), 1))


def _diagnostic_testing(health: NodeHealth) -> bool:
    """``testing`` without an incident is ours (a repair's validation always has its incident open)."""
    return health.state is NodeState.TESTING and health.incident is None
