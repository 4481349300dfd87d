"""The agent's drain of its own node: drain, then requeue the evicted pods' jobs, on a background thread.

The executor's ``apply`` must not block the loop for the minutes a drain can take (a budget that refuses,
a job given time to checkpoint), so :class:`DrainRunner` runs ``Drainer.drain`` and then
``Requeuer.requeue`` on a thread and answers at once. At most one drain runs per node, and one incident is
drained at most once per runner (the plan's memory keeps that promise across agent restarts).

The loop collects what happened with :meth:`DrainRunner.updates` (each update once): the drain's outcome,
then the requeue's, which it reports to the aggregator's timeline ("drain started" is the answer of the
executor's ``apply``, reported with the pass that applied it).

The requeue needs the evicted pods' owners and labels, which the drain's report does not carry, so the
runner lists the node's pods once before the drain and keeps those the drain then reports evicted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import structlog
import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.drain import Drainer
from remediation.kubernetes.drain_policy import DrainPolicy, JsonObject
from remediation.kubernetes.drain_report import DrainReport, PodOutcome, PodReport
from remediation.kubernetes.requeue_api import Requeuer
from remediation.requeue import KEPT_REASON_PREFIX, RequeuePolicy, RequeueReport
from remediation.worker_thread import start_worker, wait_for_worker
from sim.clock import Clock

log = structlog.get_logger(__name__)

REQUEUE_ATTEMPTS = 3  # the requeue is idempotent per incident; API errors are worth a couple more tries
REQUEUE_RETRY_S = 2.0
ACCEPTED_EVICTIONS = frozenset({PodOutcome.EVICTED, PodOutcome.TIMED_OUT})


class DrainPhase(StrEnum):
    """Where the node's drain for one incident stands."""

    RUNNING = "running"
    COMPLETE = "complete"  # every pod that had to go is gone; the requeue ran
    INCOMPLETE = "incomplete"  # some pods stayed (blocked by a budget, refused, timed out); requeue ran
    FAILED = "failed"  # the drain could not run (cordon or list failed, or an unexpected error)


@dataclass(frozen=True)
class DrainUpdate:
    """One line for the aggregator's timeline: what the drain (``requeue=False``) or requeue did."""

    incident_id: str
    ok: bool
    detail: str
    requeue: bool = False


@dataclass(frozen=True)
class DrainSetup:
    """What the executor needs to drain its node: the policies and the time sources."""

    drain_policy: DrainPolicy = field(default_factory=DrainPolicy)
    requeue_policy: RequeuePolicy = field(default_factory=RequeuePolicy)
    clock: Clock | None = None  # None: real time
    sleep: Callable[[float], None] = time.sleep
    requeue_observe_timeout_s: float = 30.0


@dataclass
class DrainState:
    """The drain of one incident, as the runner knows it."""

    incident_id: str
    phase: DrainPhase = DrainPhase.RUNNING
    report: DrainReport | None = None
    requeue: RequeueReport | None = None


class DrainRunner:
    """Drains one node in the background, one incident at a time."""

    def __init__(self, api_client: client.ApiClient, node: str, setup: DrainSetup, clock: Clock) -> None:
        self.node = node
        self._requeuer = Requeuer(
            api_client,
            policy=setup.requeue_policy,
            clock=clock,
            sleep=setup.sleep,
            observe_timeout_s=setup.requeue_observe_timeout_s,
        )
        # The pods of an `off` kind stay on the node; the requeuer knows their owners' kinds.
        self._drainer = Drainer(
            api_client,
            policy=setup.drain_policy,
            clock=clock,
            sleep=setup.sleep,
            kept_pods=self._requeuer.kept_pods,
        )
        self._requeues = setup.requeue_policy.restarts_anything
        self._sleep = setup.sleep
        self._lock = threading.Lock()
        self._state: DrainState | None = None
        self._updates: list[DrainUpdate] = []
        self._thread: threading.Thread | None = None
        self._log = log.bind(node=node)

    @property
    def state(self) -> DrainState | None:
        """The latest drain's state (running or finished); None before the first."""
        with self._lock:
            return self._state

    def start(self, incident_id: str, deadline_s: float) -> str:
        """Start draining for ``incident_id`` unless a drain for it already started; returns what happened."""
        with self._lock:
            current = self._state
            if current is not None and current.incident_id == incident_id:
                return f"drain for {incident_id} already {current.phase}"
            if current is not None and current.phase is DrainPhase.RUNNING:
                return f"drain for {current.incident_id} still running: {incident_id} waits"
            self._state = DrainState(incident_id)
        self._thread = start_worker(self._run, (incident_id, deadline_s), f"gpuhealth-drain:{self.node}")
        return "drain started"

    def updates(self) -> list[DrainUpdate]:
        """What happened since the last call (each update is returned once)."""
        with self._lock:
            taken, self._updates = self._updates, []
        return taken

    def wait(self, timeout_s: float) -> bool:
        """Wait for the running drain (and its requeue) to end; True when none runs (tests, shutdown)."""
        return wait_for_worker(self._thread, timeout_s)

    # --- the background thread ---------------------------------------------------------------------------

    def _run(self, incident_id: str, deadline_s: float) -> None:
        try:
            self._drain_then_requeue(incident_id, deadline_s)
        except Exception as exc:  # noqa: BLE001 - a bug here must end as a failed drain, not a silent thread
            self._log.exception("drain_crashed", incident=incident_id)
            self._finish(incident_id, DrainPhase.FAILED, f"drain failed: {type(exc).__name__}: {exc}")

    def _drain_then_requeue(self, incident_id: str, deadline_s: float) -> None:
        before = self._pods_by_uid()
        report = self._drainer.drain(self.node, incident_id=incident_id, deadline_s=deadline_s)
        with self._lock:
            if self._state is not None:
                self._state.report = report
        if report.error is not None:
            self._finish(incident_id, DrainPhase.FAILED, report.error)
            return
        phase = DrainPhase.COMPLETE if report.complete else DrainPhase.INCOMPLETE
        self._finish(incident_id, phase, drain_summary(report))
        evicted = [
            before[pod.uid] for pod in report.pods if pod.outcome in ACCEPTED_EVICTIONS and pod.uid in before
        ]
        if evicted and self._requeues:
            self._requeue(evicted, incident_id)

    def _pods_by_uid(self) -> dict[str, JsonObject]:
        try:
            pods = self._drainer.api.list_node_pods(self.node)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            # The drain lists again and goes ahead; only the requeue loses its view of the owners.
            self._log.warning("pods_before_drain_unreadable", error=str(exc).splitlines()[0])
            return {}
        return {str(pod["metadata"].get("uid", "")): pod for pod in pods}

    def _requeue(self, evicted: Sequence[JsonObject], incident_id: str) -> None:
        report = self._requeuer.requeue(evicted, incident_id=incident_id, node=self.node)
        for _ in range(REQUEUE_ATTEMPTS - 1):
            if not report.failed:
                break
            self._sleep(REQUEUE_RETRY_S)
            report = self._requeuer.requeue(evicted, incident_id=incident_id, node=self.node)
        with self._lock:
            if self._state is not None:
                self._state.requeue = report
            update = DrainUpdate(
                incident_id, ok=not report.failed, detail=requeue_summary(report), requeue=True
            )
            self._updates.append(update)

    def _finish(self, incident_id: str, phase: DrainPhase, detail: str) -> None:
        with self._lock:
            if self._state is not None and self._state.incident_id == incident_id:
                self._state.phase = phase
            self._updates.append(DrainUpdate(incident_id, ok=phase is DrainPhase.COMPLETE, detail=detail))
        self._log.info("drain_outcome", incident=incident_id, phase=str(phase), detail=detail)


def drain_summary(report: DrainReport) -> str:
    """One line: the drain's totals and the pods that did not go, for the timeline."""
    totals = ", ".join(f"{outcome} {count}" for outcome, count in sorted(report.totals.items()))
    stuck = [f"{p.namespace}/{p.name} {p.outcome}: {p.reason}" for p in report.pods if not _gone(p.outcome)]
    kept = [f"{p.namespace}/{p.name} ({p.reason})" for p in report.pods if is_kept_by_requeue_mode(p)]
    verdict = "drain complete" if report.complete else "drain incomplete"
    tail = f"; left: {'; '.join(stuck)}" if stuck else ""
    tail += f"; kept: {'; '.join(kept)}" if kept else ""
    return f"{verdict} in {report.seconds:.1f} s ({totals or 'no pods'}){tail}"


def requeue_summary(report: RequeueReport) -> str:
    """One line: each job and what the requeue did to it."""
    parts = [f"{o.workload.describe()}: {o.result} ({o.action})" for o in report.outcomes]
    return "requeue: " + ("; ".join(parts) if parts else "no job to requeue")


def is_kept_by_requeue_mode(pod: PodReport) -> bool:
    """Whether the drain left ``pod`` on the node because its workload kind's requeue mode is ``off`` (the
    timeline names those, unlike the DaemonSet and mirror pods every node keeps)."""
    return pod.outcome is PodOutcome.SKIPPED and pod.reason.startswith(KEPT_REASON_PREFIX)


def _gone(outcome: PodOutcome) -> bool:
    return outcome in (PodOutcome.EVICTED, PodOutcome.GONE, PodOutcome.SKIPPED)
