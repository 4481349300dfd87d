"""Drain one node the way ``kubectl drain`` does, with modes per namespace or label, and report per pod.

Steps: cordon (the executor's patch: ``spec.unschedulable`` and the ``gpuhealth.io/cordoned`` annotation);
list the node's pods (``fieldSelector=spec.nodeName=NODE``); ask ``kept_pods`` (when given) which pods to
leave on the node (their workload kind's requeue mode is ``off``), and the drain's own ``keep`` (a partial
drain: the pods not bound to the faulty GPUs, ``remediation/kubernetes/drain/partial.py``, which also skips
the cordon); decide per pod (``drain_policy.decide``);
if the policy refuses any pod, evict nothing (kubectl's rule: a partial drain surprises more than none);
otherwise evict through the Eviction API from a bounded thread pool, each pod when its mode says, and wait
until each evicted pod is no longer on the node (gone, or replaced by a pod with a new UID).

Waiting reads the node's pod list every ``poll_interval_s`` (one request per node per interval, whatever
the number of pods) rather than watching: time then only moves through the injected ``sleep``, which keeps a
``ManualClock`` test deterministic, and the cost at 1 s is one cheap, field-selected LIST per draining node.

A PodDisruptionBudget that keeps refusing (429) is retried with jittered backoff (at least the server's
``Retry-After``) until the pod's or the drain's deadline; the pod then ends ``blocked`` and the node stays
cordoned: a budget is never overridden, the caller decides whether to try again later.
"""

from __future__ import annotations

import random as random_module
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ALL_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from typing import Any

import structlog
import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.clock import Clock
from remediation.kubernetes.bodies import cordon_patch
from remediation.kubernetes.drain.api import DrainApi
from remediation.kubernetes.drain.policy import (
    FINISHED_PHASES,
    DrainMode,
    DrainPolicy,
    PodDecision,
    Verdict,
    decide,
    is_job_pod,
)
from remediation.kubernetes.drain.report import DrainReport, PodOutcome, PodReport
from remediation.kubernetes.errors import (
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    api_error,
)
from remediation.kubernetes.rest import JsonObject
from remediation.kubernetes.retry import RetryPolicy
from remediation.kubernetes.settings import RetrySettings

log = structlog.get_logger(__name__)


KeptPods = Callable[[Sequence[JsonObject]], Mapping[str, str]]
"""Given the node's pods, the uids of those to leave on the node, each with why (requeue mode ``off``)."""


class DrainInputError(ValueError):
    """The caller asked for a drain that cannot be done (no node name, a deadline that is not positive)."""


class Stage(StrEnum):
    """Where one pod is in the drain."""

    PENDING = "pending"  # its mode's wait has not passed yet
    EVICTING = "evicting"  # an eviction request (or its retries) is in flight
    LEAVING = "leaving"  # evicted (or already terminating): waiting for it to leave the node
    DONE = "done"


@dataclass
class _Pod:
    """The drain's state for one pod."""

    pod: JsonObject
    decision: PodDecision
    due: float
    stop_at: float
    stage: Stage = Stage.PENDING
    attempts: int = 0
    outcome: PodOutcome | None = None
    reason: str = ""
    seconds: float = 0.0

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace", ""))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"].get("name", ""))

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"].get("uid", ""))


@dataclass(frozen=True)
class _EvictResult:
    """What the eviction requests for one pod came to: accepted (None outcome) or a final outcome."""

    attempts: int
    outcome: PodOutcome | None = None
    reason: str = "eviction accepted"


@dataclass
class _Run:
    """One drain in progress."""

    node: str
    started: float
    deadline: float
    pods: list[_Pod] = field(default_factory=list)
    last_summary: float = 0.0
    last_observed: float | None = None
    partial: bool = False


class Drainer:
    """Drains nodes through the API server; one instance may drain several nodes one after another."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        policy: DrainPolicy,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
        rng: random_module.Random | None = None,
        field_manager: str = "gpuhealth",
        request_timeout_s: float = 10.0,
        retry: RetrySettings | None = None,
        kept_pods: KeptPods | None = None,
    ) -> None:
        self.policy = policy
        self._kept_pods = kept_pods
        self.api = DrainApi(api_client, field_manager=field_manager, request_timeout_s=request_timeout_s)
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random_module.Random()  # noqa: S311 - backoff jitter, not a secret
        self._retry = RetryPolicy(
            retry or RetrySettings(request_timeout_s=request_timeout_s),
            sleep=sleep,
            monotonic=clock.monotonic,
            wall=lambda: clock.now().timestamp(),
        )

    def drain(
        self,
        node: str,
        *,
        incident_id: str,
        deadline_s: float,
        keep: KeptPods | None = None,
        cordon: bool = True,
    ) -> DrainReport:
        """Cordon ``node`` and evict its pods per the policy; returns when all are settled or time is up.

        ``keep`` names more pods to leave on the node for this drain only (a partial drain); ``cordon``
        False leaves the node schedulable (the report is then ``partial``)."""
        if not node:
            raise DrainInputError("drain needs a node name")
        if deadline_s <= 0:
            raise DrainInputError(f"drain deadline must be positive, got {deadline_s}")
        started = self._clock.monotonic()
        run = _Run(node, started, started + deadline_s, last_summary=started)
        bound = log.bind(node=node, incident_id=incident_id)
        run.partial = not cordon
        if cordon:
            cordoned = self._retry.call(
                lambda: self.api.patch_node(node, cordon_patch()), step="drain-cordon"
            )
            if not cordoned.ok:
                return self._report(
                    run, incident_id, cordoned=False, error=_failed("cordon", cordoned.failure)
                )
        listing = self._retry.call(lambda: self.api.list_node_pods(node), step="drain-list")
        if listing.value is None:
            return self._report(run, incident_id, cordoned=cordon, error=_failed("list", listing.failure))
        kept = {**(keep(listing.value) if keep is not None else {})}
        kept.update(self._kept_pods(listing.value) if self._kept_pods is not None else {})
        run.pods = [
            self._plan(pod, run, kept.get(str(pod["metadata"].get("uid", "")))) for pod in listing.value
        ]
        run.last_observed = self._clock.monotonic()  # that listing counts as the first look
        bound.info("drain started", pods=len(run.pods), deadline_s=deadline_s)
        refused = [pod for pod in run.pods if pod.decision.verdict is Verdict.REFUSE]
        if refused:
            self._refuse(run, refused, bound)
        else:
            self._evict_all(run, bound)
        report = self._report(run, incident_id, cordoned=cordon)
        bound.info("drain finished", complete=report.complete, seconds=report.seconds, **report.totals)
        return report

    # --- planning ------------------------------------------------------------------------------------------

    def _plan(self, pod: JsonObject, run: _Run, kept: str | None) -> _Pod:
        decision = decide(pod, self.policy, kept=kept)
        due = run.started
        waits = decision.mode is DrainMode.DELETE_AFTER_TIMEOUT or (
            decision.mode is DrainMode.ALLOW_COMPLETION and is_job_pod(pod)
        )
        if waits:
            due += decision.timeout_s
        state = _Pod(pod, decision, due=due, stop_at=min(run.deadline, due + self.policy.pod_timeout_s))
        if decision.verdict is Verdict.SKIP:
            self._finish(state, run, PodOutcome.SKIPPED, decision.reason)
        elif decision.verdict is Verdict.WAIT:
            state.stage = Stage.LEAVING
        return state

    def _refuse(self, run: _Run, refused: list[_Pod], bound: Any) -> None:
        names = ", ".join(f"{pod.namespace}/{pod.name}" for pod in refused)
        bound.warning("drain refused: the policy does not allow evicting some pods", pods=names)
        for pod in run.pods:
            if pod.decision.verdict is Verdict.REFUSE:
                self._finish(pod, run, PodOutcome.REFUSED, pod.decision.reason)
            elif pod.stage is not Stage.DONE:
                self._finish(pod, run, PodOutcome.NOT_ATTEMPTED, f"drain refused over {names}")

    # --- the eviction loop ---------------------------------------------------------------------------------

    def _evict_all(self, run: _Run, bound: Any) -> None:
        in_flight: dict[Future[_EvictResult], _Pod] = {}
        with ThreadPoolExecutor(self.policy.max_in_flight, thread_name_prefix=f"drain-{run.node}") as pool:
            while True:
                now = self._clock.monotonic()
                for pod in _in_stage(run.pods, Stage.PENDING):
                    if now >= pod.due:
                        pod.stage = Stage.EVICTING
                        in_flight[pool.submit(self._evict, pod)] = pod
                for future in [f for f in in_flight if f.done()]:
                    self._evicted(in_flight.pop(future), future.result(), run)
                if self._should_observe(run, now, busy=bool(in_flight)):
                    run.last_observed = now
                    self._observe(run)
                self._expire(run, now)
                if all(pod.stage is Stage.DONE for pod in run.pods):
                    return
                self._summarize(run, now, bound)
                if in_flight:
                    # Requests in flight: wait for them in real time, so a ManualClock never runs ahead.
                    wait(in_flight, timeout=self.policy.poll_interval_s, return_when=ALL_COMPLETED)
                else:
                    self._sleep(self.policy.poll_interval_s)

    def _evict(self, pod: _Pod) -> _EvictResult:
        """Send the eviction until accepted or final; 429 and transient errors back off with jitter."""
        attempts = 0
        while True:
            attempts += 1
            try:
                self.api.evict(
                    pod.namespace, pod.name, uid=pod.uid or None, grace_period_s=self.policy.grace_period_s
                )
                return _EvictResult(attempts)
            except ApiException as error:
                refused = api_error(error)
                reason, retry_after = f"HTTP {refused.status}: {refused.message}", refused.retry_after_s
                final, blocked = _final_outcome(refused, reason), isinstance(refused, KubeTooManyRequests)
            except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as error:
                reason, retry_after = f"transport error: {type(error).__name__}", None
                final, blocked = None, False
            if final is not None:
                return _EvictResult(attempts, *final)
            wait_s = self._backoff(attempts, retry_after)
            if self._clock.monotonic() + wait_s > pod.stop_at:
                outcome = PodOutcome.BLOCKED if blocked else PodOutcome.FAILED
                return _EvictResult(attempts, outcome, f"{reason} (gave up at the deadline)")
            log.debug("eviction refused, retrying", pod=f"{pod.namespace}/{pod.name}", wait_s=wait_s)
            self._sleep(wait_s)

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        """Doubling backoff with full jitter over its upper half, never below the server's Retry-After."""
        ceiling = min(self.policy.retry_initial_s * 2.0 ** (attempts - 1), self.policy.retry_max_s)
        jittered = ceiling * (0.5 + 0.5 * self._rng.random())
        return max(jittered, retry_after or 0.0)

    def _evicted(self, pod: _Pod, result: _EvictResult, run: _Run) -> None:
        pod.attempts = result.attempts
        if result.outcome is None:
            pod.stage = Stage.LEAVING
            pod.reason = result.reason
        else:
            self._finish(pod, run, result.outcome, result.reason)

    def _should_observe(self, run: _Run, now: float, *, busy: bool) -> bool:
        """List when someone waits on the list, at most once per poll interval while evictions are in flight
        (one LIST per node per interval, not one per answered eviction)."""
        if not any(pod.stage in (Stage.LEAVING, Stage.PENDING) for pod in run.pods):
            return False
        if run.last_observed is None or not busy:
            return True
        return now - run.last_observed >= self.policy.poll_interval_s

    def _observe(self, run: _Run) -> None:
        """Read the node's pods once: who has left, and which allow-completion pods have finished."""
        try:
            present = {pod["metadata"].get("uid"): pod for pod in self.api.list_node_pods(run.node)}
        except (ApiException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as error:
            log.warning("listing the node's pods failed; trying again", node=run.node, error=str(error))
            return
        for pod in run.pods:
            current = present.get(pod.uid)
            if pod.stage is Stage.LEAVING and current is None:
                evicted = pod.decision.verdict is Verdict.EVICT
                self._finish(pod, run, PodOutcome.EVICTED if evicted else PodOutcome.GONE, "left the node")
            elif pod.stage is Stage.PENDING and current is None:
                self._finish(pod, run, PodOutcome.GONE, "left the node before its eviction")
            elif pod.stage is Stage.PENDING and current is not None and _finished_batch(current, pod):
                pod.due = min(pod.due, self._clock.monotonic())  # allow-completion: done, evict it now

    def _expire(self, run: _Run, now: float) -> None:
        for pod in run.pods:
            if pod.stage is Stage.LEAVING and now >= pod.stop_at:
                self._finish(pod, run, PodOutcome.TIMED_OUT, "still on the node at its deadline")
            elif pod.stage is Stage.PENDING and now >= run.deadline:
                self._finish(pod, run, PodOutcome.TIMED_OUT, "its mode's wait outlasted the drain deadline")

    def _finish(self, pod: _Pod, run: _Run, outcome: PodOutcome, reason: str) -> None:
        pod.stage, pod.outcome, pod.reason = Stage.DONE, outcome, reason
        pod.seconds = round(self._clock.monotonic() - run.started, 3)
        log.info(
            "drain pod outcome",
            node=run.node,
            pod=f"{pod.namespace}/{pod.name}",
            outcome=str(outcome),
            reason=reason,
            mode=str(pod.decision.mode),
            attempts=pod.attempts,
            seconds=pod.seconds,
        )

    def _summarize(self, run: _Run, now: float, bound: Any) -> None:
        if now - run.last_summary < self.policy.summary_interval_s:
            return
        run.last_summary = now
        stages = {str(stage): len(_in_stage(run.pods, stage)) for stage in Stage}
        bound.info("drain progress", seconds=round(now - run.started, 1), **stages)

    def _report(
        self, run: _Run, incident_id: str, *, cordoned: bool, error: str | None = None
    ) -> DrainReport:
        pods = tuple(
            PodReport(
                namespace=pod.namespace,
                name=pod.name,
                uid=pod.uid,
                outcome=pod.outcome or PodOutcome.TIMED_OUT,
                reason=pod.reason,
                mode=str(pod.decision.mode),
                attempts=pod.attempts,
                seconds=pod.seconds,
            )
            for pod in run.pods
        )
        seconds = round(self._clock.monotonic() - run.started, 3)
        return DrainReport(
            node=run.node,
            incident_id=incident_id,
            cordoned=cordoned,
            seconds=seconds,
            pods=pods,
            error=error,
            partial=run.partial,
        )


def _in_stage(pods: Iterable[_Pod], stage: Stage) -> list[_Pod]:
    return [pod for pod in pods if pod.stage is stage]


def _finished_batch(current: JsonObject, pod: _Pod) -> bool:
    phase = (current.get("status") or {}).get("phase")
    return pod.decision.mode is DrainMode.ALLOW_COMPLETION and phase in FINISHED_PHASES


def _final_outcome(refused: KubeApiError, reason: str) -> tuple[PodOutcome, str] | None:
    """The outcome an answer settles at once; None when it is worth asking again (429, 5xx but 500)."""
    if isinstance(refused, KubeNotFound):
        return PodOutcome.GONE, "already gone (404)"
    if isinstance(refused, KubeConflict):
        return PodOutcome.GONE, "replaced: the name now belongs to a pod with another UID (409)"
    if isinstance(refused, KubeTooManyRequests):
        return None  # a PodDisruptionBudget says not now (or the server throttles): ask again
    if isinstance(refused, KubeServerError):
        if refused.status == HTTPStatus.INTERNAL_SERVER_ERROR:
            return PodOutcome.FAILED, f"{reason} (several PodDisruptionBudgets match: fix the budgets)"
        return None  # 502/503/504: the server is going or coming back
    return PodOutcome.FAILED, reason


def _failed(step: str, failure: object) -> str:
    describe = getattr(failure, "describe", None)
    return f"{step} failed: {describe() if callable(describe) else 'unknown error'}"
