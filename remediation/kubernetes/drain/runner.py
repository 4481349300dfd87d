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

Write-ahead for the requeue: before the first eviction the runner writes those pods (owners and labels only)
into the node's ``gpuhealth.io/requeue-pending`` annotation, for the incident, and removes it once the requeue
ended. A drain killed between an eviction and the requeue (the central remediator's process killed, the
agent's) is resumed from the start; its pods are gone from the node by then, and without the record the jobs
they belonged to would never be restarted (a gang left running with a replaced worker, or a job left
suspended half-way through its toggle). The resumed run adds the recorded pods that are gone to the evicted
ones, and the requeue, idempotent per incident, finishes what the first run began.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog
import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.aggregator_api import DrainPhase
from core.clock import Clock
from core.gpu_pods import DraKey, GpuPodMap, GpuPodMapError
from remediation.executor.background_drain import BackgroundDrain, DrainUpdate
from remediation.executor.background_drain import DrainState as DrainStateBase
from remediation.kubernetes.dra_claims import claims_gpu_pod_map
from remediation.kubernetes.drain.drainer import Drainer
from remediation.kubernetes.drain.partial import KEPT_REASON, GpuPodReader, scope_for
from remediation.kubernetes.drain.policy import DrainPolicy, JsonObject
from remediation.kubernetes.drain.report import DrainReport, PodOutcome, PodReport
from remediation.kubernetes.names import REQUEUE_PENDING_ANNOTATION
from remediation.kubernetes.requeue.api import Requeuer
from remediation.kubernetes.requeue.decisions import KEPT_REASON_PREFIX, RequeuePolicy, RequeueReport
from remediation.kubernetes.rest import RestClient

log = structlog.get_logger(__name__)

REQUEUE_ATTEMPTS = 3  # the requeue is idempotent per incident; API errors are worth a couple more tries
REQUEUE_RETRY_S = 2.0
CLAIMS_TIMEOUT_S = 10.0  # each ResourceClaim read of a partial drain's second mapping source
ACCEPTED_EVICTIONS = frozenset({PodOutcome.EVICTED, PodOutcome.TIMED_OUT})


# Kubernetes phases: COMPLETE when every pod that had to go is gone, INCOMPLETE when some stayed (blocked
# by a budget, refused, timed out), FAILED when the cordon or the list failed; the requeue runs after both.
__all__ = ["DrainPhase", "DrainRunner", "DrainSetup", "DrainState", "DrainUpdate"]


@dataclass(frozen=True)
class DrainSetup:
    """What the executor needs to drain its node: the policies and the time sources."""

    drain_policy: DrainPolicy = field(default_factory=DrainPolicy)
    requeue_policy: RequeuePolicy = field(default_factory=RequeuePolicy)
    clock: Clock | None = None  # None: real time
    sleep: Callable[[float], None] = time.sleep
    requeue_observe_timeout_s: float = 30.0
    # Reads which pods hold which GPU, for a partial drain (``Drain.gpus``); None: every drain is whole-node.
    gpu_pods: GpuPodReader | None = None


@dataclass
class DrainState(DrainStateBase):
    """The drain of one incident, with the reports of the drain and of the requeue once they exist."""

    report: DrainReport | None = None
    requeue: RequeueReport | None = None


class DrainRunner(BackgroundDrain[DrainState]):
    """Drains one node in the background, one incident at a time."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node: str,
        setup: DrainSetup,
        clock: Clock,
        dra_devices: Callable[[], Mapping[DraKey, str]] = dict,
    ) -> None:
        super().__init__(log.bind(node=node), f"gpuhealth-drain:{node}")
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
        self._gpu_pods = setup.gpu_pods
        self._dra_devices = dra_devices
        self._claims_rest = RestClient(api_client, request_timeout_s=CLAIMS_TIMEOUT_S)
        self._gpus: dict[str, tuple[str, ...]] = {}  # incident -> the GPUs its drain is limited to

    def start(self, incident_id: str, deadline_s: float, *, gpus: tuple[str, ...] = ()) -> str:
        """Start the drain of ``incident_id``; with ``gpus``, a partial drain of the pods on them."""
        self._gpus[incident_id] = gpus
        return super().start(incident_id, deadline_s)

    def _new_state(self, incident_id: str) -> DrainState:
        return DrainState(incident_id)

    # --- the background thread ---------------------------------------------------------------------------

    def _drain_node(self, incident_id: str, deadline_s: float) -> None:
        """Drain, then requeue the evicted pods' jobs (every error, even a bug, ends as a failed drain)."""
        before = self._pods_by_uid()
        recorded = self._record_pending(incident_id, before) if self._requeues else {}
        gpus = self._gpus.pop(incident_id, ())
        scope = scope_for(gpus, self._mapping_sources() if gpus else [])
        if scope.gpus:
            self._log.info("drain scope", incident_id=incident_id, scope=scope.describe())
        report = self._drainer.drain(
            self.node,
            incident_id=incident_id,
            deadline_s=deadline_s,
            keep=scope.kept,
            cordon=not scope.partial,
        )

        def keep_report(state: DrainState) -> None:
            state.report = report

        self._edit(keep_report)
        if report.error is not None:
            self._finish(incident_id, DrainPhase.FAILED, report.error)
            return
        phase = DrainPhase.COMPLETE if report.complete else DrainPhase.INCOMPLETE
        summary = drain_summary(report)
        self._finish(incident_id, phase, f"{summary}; {scope.describe()}" if scope.gpus else summary)
        evicted = [
            before[pod.uid] for pod in report.pods if pod.outcome in ACCEPTED_EVICTIONS and pod.uid in before
        ]
        # the pods an interrupted run of this incident evicted: recorded, gone from the node before this run
        evicted += [pod for uid, pod in recorded.items() if uid not in before]
        if evicted and self._requeues:
            self._requeue(evicted, incident_id)
        elif recorded or (before and self._requeues):
            self._clear_pending()

    def _mapping_sources(self) -> list[Callable[[], GpuPodMap]]:
        """Where a partial drain reads which pod holds which GPU, in order: the kubelet's PodResources on
        the node, then (a DRA node only) the pods' ResourceClaims from the API server."""
        dra = self._dra_devices()
        sources: list[Callable[[], GpuPodMap]] = []
        reader = self._gpu_pods
        if reader is not None:
            sources.append(lambda: reader(dra))
        if dra:
            sources.append(lambda: self._claims_map(dra))
        return sources

    def _claims_map(self, dra: Mapping[DraKey, str]) -> GpuPodMap:
        try:
            pods = self._drainer.api.list_node_pods(self.node)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise GpuPodMapError(f"the node's pods unreadable: {str(exc).splitlines()[0]}") from exc
        return claims_gpu_pod_map(self._claims_rest, self.node, pods, dra)

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
        update = DrainUpdate(incident_id, ok=not report.failed, detail=requeue_summary(report), requeue=True)

        def keep_requeue(state: DrainState) -> None:
            state.requeue = report

        self._record(update, edit=keep_requeue)
        if not report.failed:
            self._clear_pending()

    def _record_pending(self, incident_id: str, before: Mapping[str, JsonObject]) -> dict[str, JsonObject]:
        """Write the pods about to be evicted into the node's annotation for ``incident_id``, keeping those an
        earlier run of the same incident recorded; returns the earlier run's (uid -> pod). Best effort: a
        failed write is logged and the drain goes on as it did before the record existed."""
        api = self._drainer.api
        try:
            earlier = _pending_pods(
                api.node_annotations(self.node).get(REQUEUE_PENDING_ANNOTATION), incident_id
            )
            pods = earlier | {uid: _requeue_view(pod) for uid, pod in before.items()}
            if pods and pods != earlier:
                value = json.dumps(
                    {"incident": incident_id, "pods": list(pods.values())}, separators=(",", ":")
                )
                api.patch_node(self.node, {"metadata": {"annotations": {REQUEUE_PENDING_ANNOTATION: value}}})
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self._log.warning("requeue_record_not_written", error=str(exc).splitlines()[0])
            return {}
        return earlier

    def _clear_pending(self) -> None:
        try:
            self._drainer.api.patch_node(
                self.node, {"metadata": {"annotations": {REQUEUE_PENDING_ANNOTATION: None}}}
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self._log.warning("requeue_record_not_cleared", error=str(exc).splitlines()[0])


def drain_summary(report: DrainReport) -> str:
    """One line: the drain's totals and the pods that did not go, for the timeline."""
    totals = ", ".join(f"{outcome} {count}" for outcome, count in sorted(report.totals.items()))
    stuck = [f"{p.namespace}/{p.name} {p.outcome}: {p.reason}" for p in report.pods if not _gone(p.outcome)]
    kept = [f"{p.namespace}/{p.name} ({p.reason})" for p in report.pods if is_kept_by_requeue_mode(p)]
    on_healthy_gpus = sum(
        1 for p in report.pods if p.outcome is PodOutcome.SKIPPED and p.reason == KEPT_REASON
    )
    verdict = "drain complete" if report.complete else "drain incomplete"
    tail = f"; left: {'; '.join(stuck)}" if stuck else ""
    tail += f"; kept: {'; '.join(kept)}" if kept else ""
    tail += f"; {on_healthy_gpus} pods kept running (not on a faulty GPU)" if on_healthy_gpus else ""
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


def _requeue_view(pod: Mapping[str, object]) -> JsonObject:
    """What the requeue reads of an evicted pod: its identity, labels and owners."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    kept = {
        key: meta[key] for key in ("namespace", "name", "uid", "labels", "ownerReferences") if key in meta
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept}


def _pending_pods(value: str | None, incident_id: str) -> dict[str, JsonObject]:
    """The pods of the annotation's record when it is for ``incident_id`` (uid -> pod); otherwise none."""
    if not value:
        return {}
    try:
        record = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(record, dict) or record.get("incident") != incident_id:
        return {}
    pods = record.get("pods")
    found: dict[str, JsonObject] = {}
    for pod in pods if isinstance(pods, list) else []:
        uid = ((pod.get("metadata") or {}).get("uid") if isinstance(pod, dict) else None) or ""
        if uid:
            found[str(uid)] = pod
    return found
