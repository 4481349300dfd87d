"""The requeue: its requests, raw JSON through ``rest.RestClient`` (not ``CustomObjectsApi``), and the step.

Workload objects are custom resources (JobSet, TrainJob, PyTorchJob, Volcano Job, Kueue Workload) plus
batch/v1 Job, addressed by the REST paths their ownerReferences give (``ObjectRef.path``). Patches are JSON
merge patches: strategic merge is refused on custom resources (415). Answers are parsed JSON dicts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

import structlog
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.clock import Clock
from remediation.kubernetes.errors import KubeConflict, KubeNotFound
from remediation.kubernetes.requeue.decisions import (
    PYTORCH_JOB_NAME_LABEL,
    Decision,
    KindMode,
    ObjectRef,
    Outcome,
    OwnerChain,
    RequeueAction,
    RequeuePolicy,
    RequeueReport,
    Result,
    active_patch,
    already_requeued,
    claim_patch,
    controller_ref,
    deactivation_observed,
    decide,
    event_body,
    governing_kind,
    is_kueue_managed,
    kept_reason,
    left_inactive,
    left_suspended,
    next_owner_to_follow,
    pod_owner_ref,
    ref_of,
    release_patch,
    requeued_within,
    suspend_patch,
    suspension_observed,
    volcano_command,
    workload_of,
)
from remediation.kubernetes.rest import JSON, MERGE_PATCH, JsonObject, RestClient

log = structlog.get_logger(__name__)

PODS_PATH = "/api/v1/namespaces/{namespace}/pods"
POD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"
EVENTS_PATH = "/api/v1/namespaces/{namespace}/events"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_WORKLOADS_PATH = "/apis/kueue.x-k8s.io/{version}/namespaces/{namespace}/workloads"
# Newest first. Kueue 0.15 and later store Workloads as v1beta2 and convert v1beta1 through a webhook; a
# write through v1beta1 can be refused there (Kueue 0.17 rejects a merge patch of ``spec.active`` on an
# admitted Workload: its v1beta2 CEL rule on ``priorityClassSource`` sees the field lost in the round
# trip). Older Kueue serves v1beta1 only.
KUEUE_WORKLOAD_VERSIONS = ("v1beta2", "v1beta1")
VOLCANO_COMMANDS_PATH = "/apis/bus.volcano.sh/v1alpha1/namespaces/{namespace}/commands"
CLAIM_ATTEMPTS = 5
POLL_INITIAL_S = 0.2
POLL_MAX_S = 4.0
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


class WriteConflict(Exception):
    """The object changed since it was read (409): re-read and decide again."""


class RequeueApi:
    """GET, merge-patch, list, delete and create what a requeue touches; counts requests and writes."""

    def __init__(self, api_client: client.ApiClient, *, field_manager: str, request_timeout_s: float) -> None:
        self._rest = RestClient(api_client, request_timeout_s=request_timeout_s)
        self._write_query = [("fieldManager", field_manager)]
        self._kueue_version: str | None = None  # the Workload version the server answered with

    @property
    def requests_total(self) -> int:
        """Every request sent."""
        return self._rest.requests_total

    @property
    def writes_total(self) -> int:
        """The requests that change something (all but GET)."""
        return self._rest.writes_total

    def get(self, ref: ObjectRef) -> JsonObject | None:
        """The object at ``ref``, or None when it is gone (or is another object by now: uid differs)."""
        try:
            found = self._rest.json("GET", ref.path)
        except KubeNotFound:
            return None
        uid = (found.get("metadata") or {}).get("uid")
        return None if ref.uid and uid != ref.uid else found

    def merge_patch(self, ref: ObjectRef, body: JsonObject) -> JsonObject:
        """JSON merge patch; a ``metadata.resourceVersion`` in ``body`` makes it a compare-and-set.

        Raises :class:`WriteConflict` on 409.
        """
        try:
            return self._rest.json(
                "PATCH", ref.path, query=self._write_query, body=body, content_type=MERGE_PATCH
            )
        except KubeConflict as error:
            raise WriteConflict(f"{ref.describe()} changed since it was read") from error

    def list_workloads(self, namespace: str) -> list[JsonObject]:
        """The Kueue Workloads of ``namespace`` at the newest version served (an empty list when Kueue is
        not installed); each carries its ``apiVersion``, so that writes to it go to that version."""
        versions = sorted(KUEUE_WORKLOAD_VERSIONS, key=lambda version: version != self._kueue_version)
        for version in versions:
            params = {"version": version, "namespace": namespace}
            try:
                answer = self._rest.json("GET", KUEUE_WORKLOADS_PATH, path_params=params)
            except KubeNotFound:
                continue
            self._kueue_version = version
            api_version = f"{KUEUE_GROUP}/{version}"
            items: list[JsonObject] = answer.get("items") or []
            return [{**item, "apiVersion": api_version, "kind": "Workload"} for item in items]
        return []

    def list_pods(self, namespace: str, label_selector: str) -> list[JsonObject]:
        """The pods of ``namespace`` matching ``label_selector``."""
        query = [("labelSelector", label_selector)]
        answer = self._rest.json("GET", PODS_PATH, path_params={"namespace": namespace}, query=query)
        items: list[JsonObject] = answer.get("items") or []
        return items

    def delete_pod(self, namespace: str, name: str, uid: str | None) -> bool:
        """Delete the pod (only that very pod: UID precondition); False when it was already gone."""
        body: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        path_params = {"namespace": namespace, "name": name}
        try:
            self._rest.json("DELETE", POD_PATH, path_params=path_params, body=body, content_type=JSON)
        except (KubeNotFound, KubeConflict):  # gone, or already replaced by a new UID
            return False
        return True

    def create_volcano_command(self, namespace: str, body: JsonObject) -> JsonObject:
        """POST a ``bus.volcano.sh/v1alpha1`` Command."""
        return self._create(VOLCANO_COMMANDS_PATH, namespace, body)

    def create_event(self, namespace: str, body: JsonObject) -> None:
        """POST a core/v1 Event."""
        self._create(EVENTS_PATH, namespace, body)

    def _create(self, path: str, namespace: str, body: JsonObject) -> JsonObject:
        path_params = {"namespace": namespace}
        return self._rest.json(
            "POST", path, path_params=path_params, query=self._write_query, body=body, content_type=JSON
        )


@dataclass
class _Resolved:
    chains: dict[str, OwnerChain] = field(default_factory=dict)
    unreadable: dict[str, Outcome] = field(default_factory=dict)
    orphans: int = 0
    owners: dict[str, JsonObject | None] = field(default_factory=dict)


class Requeuer:
    """Requeue the training jobs whose pods a drain evicted, once per incident (docs/requeue.md).

    Safe to call again with the same incident (after a crash, for a second failed node of the same job, or
    from another node's agent at the same moment): the top owner's ``gpuhealth.io/requeued-incident``
    annotation is written with a compare-and-set before anything else, and a job that carries it is left
    alone.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        policy: RequeuePolicy,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
        field_manager: str = "gpuhealth-agent",
        request_timeout_s: float = 10.0,
        observe_timeout_s: float = 30.0,
    ) -> None:
        self.api = RequeueApi(api_client, field_manager=field_manager, request_timeout_s=request_timeout_s)
        self._policy = policy
        self._clock = clock
        self._sleep = sleep
        self._component = field_manager
        self._observe_timeout_s = observe_timeout_s

    def requeue(self, evicted_pods: Sequence[JsonObject], *, incident_id: str, node: str) -> RequeueReport:
        """Follow each evicted pod's owners and restart each distinct job at most once for ``incident_id``."""
        resolved = self._resolve_all(evicted_pods)
        handled = tuple(self._handle(chain, incident_id, node) for chain in resolved.chains.values())
        outcomes = handled + tuple(resolved.unreadable.values())
        report = RequeueReport(incident_id, node, outcomes, pods_without_workload=resolved.orphans)
        log.info(
            "requeue done",
            incident=incident_id,
            node=node,
            workloads=len(outcomes),
            requeued=len(report.requeued),
            failed=len(report.failed),
        )
        return report

    def kept_pods(self, pods: Sequence[JsonObject]) -> dict[str, str]:
        """The pods (by uid) whose workload kind is ``off``, each with the reason the drain leaves it on the
        node; the owners are followed as :meth:`requeue` does. No request at all when no kind is ``off``."""
        if not self._policy.keeps_any_kind:
            return {}
        kept: dict[str, str] = {}
        seen: dict[str, JsonObject | None] = {}
        for pod in pods:
            reason = self._kept_reason(pod, seen)
            if reason is not None:
                kept[str((pod.get("metadata") or {}).get("uid", ""))] = reason
        return kept

    def _kept_reason(self, pod: JsonObject, seen: dict[str, JsonObject | None]) -> str | None:
        try:
            chain = self._resolve(pod, seen)
        except API_ERRORS as error:
            # Unknown kind: the drain goes ahead with the pod (a faulty node must not keep running work
            # because its owners could not be read), and the log says why an `off` kind may have moved.
            log.warning(
                "owners not read; pod drained", pod=ref_of(pod).describe(), error=_describe_error(error)
            )
            return None
        if chain is None:
            return None
        try:
            kind = governing_kind(chain)
        except ValueError:
            return None
        return kept_reason(kind) if self._policy.mode_for(kind) is KindMode.OFF else None

    def _resolve_all(self, evicted_pods: Sequence[JsonObject]) -> _Resolved:
        """One chain per distinct top owner; owners that could not be read become FAILED outcomes."""
        resolved = _Resolved()
        for pod in evicted_pods:
            try:
                chain = self._resolve(pod, resolved.owners)
            except API_ERRORS as error:
                owner = pod_owner_ref(pod) or ref_of(pod)
                detail = f"owners not read: {_describe_error(error)}"
                failed = Outcome(owner, None, RequeueAction.NONE, Result.FAILED, detail)
                resolved.unreadable.setdefault(_identity(owner), failed)
                continue
            if chain is None:
                resolved.orphans += 1
            else:
                resolved.chains.setdefault(_identity(ref_of(chain.top)), chain)
        return resolved

    def _resolve(self, pod: JsonObject, seen: dict[str, JsonObject | None]) -> OwnerChain | None:
        """The pod's owner chain up to the top job (and its Kueue Workload); None for other pods. ``seen``
        keeps the owners read in this call: the pods of one gang share them."""
        ref = pod_owner_ref(pod)
        owners: list[JsonObject] = []
        while ref is not None and ref.workload_kind is not None:
            key = _identity(ref)
            if key not in seen:
                seen[key] = self.api.get(ref)
            owner = seen[key]
            if owner is None:
                break
            owners.append(owner)
            ref = next_owner_to_follow(owner)
        if not owners:
            return None
        workload = None
        if is_kueue_managed(owners[-1]):
            workload = workload_of(owners[-1], self.api.list_workloads(ref_of(owners[-1]).namespace))
        return OwnerChain(pod, tuple(owners), workload)

    def _handle(self, chain: OwnerChain, incident_id: str, node: str) -> Outcome:
        top = ref_of(chain.top)
        try:
            decision = decide(chain, self._policy)
        except ValueError as error:
            return Outcome(top, None, RequeueAction.NONE, Result.LEFT_TO_WORKLOAD, str(error))
        done = self._already_done(chain, decision, incident_id)
        if done is not None:
            return Outcome(top, decision.kind, decision.action, Result.ALREADY_REQUEUED, done)
        if not decision.action.writes:
            result = Result.SKIPPED if decision.action is RequeueAction.SKIP else Result.LEFT_TO_WORKLOAD
            return Outcome(top, decision.kind, decision.action, result, decision.reason)
        claimed: Result | None = None
        try:
            claimed = self._claim(top, chain.top, decision, incident_id)
            if claimed is not Result.REQUEUED:
                detail = (
                    "another call restarted it" if claimed is Result.ALREADY_REQUEUED else "the job is gone"
                )
                return Outcome(top, decision.kind, decision.action, claimed, detail)
            return self._restart(chain, decision, incident_id, node)
        except API_ERRORS as error:
            log.warning("requeue failed", workload=top.describe(), incident=incident_id, error=str(error))
            detail = _describe_error(error)
            if claimed is Result.REQUEUED:
                detail += "; " + self._release(chain, decision)
            return Outcome(top, decision.kind, decision.action, Result.FAILED, detail)

    def _finish_interrupted_toggle(self, chain: OwnerChain, decision: Decision) -> str:
        """A call of this incident that died between the halves of a toggle left the job suspended (or its
        Workload inactive): once the controller shows the first half took, do the second half. While it
        does not, the claimer may still be waiting for it, so nothing is touched."""
        top, workload = chain.top, chain.workload
        try:
            if decision.action is RequeueAction.SUSPEND_TOGGLE and left_suspended(top):
                self.api.merge_patch(ref_of(top), suspend_patch(False))
                return "annotated already; resumed a toggle left suspended"
            if (
                decision.action is RequeueAction.WORKLOAD_ACTIVE_TOGGLE
                and workload
                and left_inactive(workload)
            ):
                self.api.merge_patch(ref_of(workload), active_patch(True))
                return "annotated already; reactivated a Workload left inactive"
        except API_ERRORS as error:
            return f"annotated already; finishing its toggle failed ({_describe_error(error)})"
        return "annotated already"

    def _release(self, chain: OwnerChain, decision: Decision) -> str:
        """Undo a claim whose action failed half-way, so a retry of the same incident can do it all again:
        the job must not stay suspended or deactivated, nor marked as restarted when it was not."""
        try:
            if decision.action is RequeueAction.WORKLOAD_ACTIVE_TOGGLE and chain.workload is not None:
                self.api.merge_patch(ref_of(chain.workload), active_patch(True))
            self.api.merge_patch(ref_of(chain.top), release_patch(decision.action))
        except API_ERRORS as error:
            log.error("requeue claim not released", workload=ref_of(chain.top).describe(), error=str(error))
            return f"claim NOT released ({_describe_error(error)})"
        return "claim released"

    def _restart(self, chain: OwnerChain, decision: Decision, incident_id: str, node: str) -> Outcome:
        """The action's writes after a won claim, then the Event."""
        ref = ref_of(chain.top)
        observed = self._carry_out(chain, decision, incident_id, node)
        body = event_body(
            chain.top,
            node=node,
            incident_id=incident_id,
            decision=decision,
            component=self._component,
            now=self._clock.now(),
        )
        detail = decision.reason + self._record_event(ref.namespace, body)
        log.info(
            "requeued workload",
            workload=ref.describe(),
            action=decision.action.value,
            incident=incident_id,
            node=node,
            observed=observed,
        )
        return Outcome(ref, decision.kind, decision.action, Result.REQUEUED, detail, observed)

    def _already_done(self, chain: OwnerChain, decision: Decision, incident_id: str) -> str | None:
        """Why no new restart is due (this incident did it, or another within the same fault's window)."""
        if already_requeued(chain.top, incident_id):
            return self._finish_interrupted_toggle(chain, decision)
        other = self._restarted_for_the_same_fault(chain.top)
        return None if other is None else f"restarted for {other} moments ago: one fault, one restart"

    def _restarted_for_the_same_fault(self, top: JsonObject) -> str | None:
        """Another incident's restart within the policy's window (several nodes of one job, one fault)."""
        return requeued_within(top, self._clock.now(), self._policy.same_fault_window_s)

    def _claim(self, ref: ObjectRef, top: JsonObject, decision: Decision, incident_id: str) -> Result:
        """Compare-and-set our annotation: REQUEUED when this call won, ALREADY_REQUEUED when another did."""
        current: JsonObject | None = top
        for _ in range(CLAIM_ATTEMPTS):
            if current is None:
                return Result.GONE
            if already_requeued(current, incident_id) or self._restarted_for_the_same_fault(current):
                return Result.ALREADY_REQUEUED
            try:
                self.api.merge_patch(
                    ref, claim_patch(current, incident_id, decision.action, self._clock.now())
                )
                return Result.REQUEUED
            except WriteConflict:
                current = self.api.get(ref)  # someone wrote in between: was it a claim for this incident?
        raise KubeConflict(HTTPStatus.CONFLICT, f"{ref.describe()} kept changing; not claimed")

    def _carry_out(self, chain: OwnerChain, decision: Decision, incident_id: str, node: str) -> bool | None:
        """The action's writes after the claim; for toggles, whether the first half was seen to take."""
        ref = ref_of(chain.top)
        if decision.action is RequeueAction.SUSPEND_TOGGLE:
            # suspend: true went with the claim; resume once the controller has stopped the pods.
            observed = self._wait_for(ref, suspension_observed)
            self.api.merge_patch(ref, suspend_patch(False))
            return observed
        if decision.action is RequeueAction.WORKLOAD_ACTIVE_TOGGLE:
            assert chain.workload is not None  # decide() picks this action only with a Workload
            workload = ref_of(chain.workload)
            self.api.merge_patch(workload, active_patch(False))
            observed = self._wait_for(workload, deactivation_observed)
            self.api.merge_patch(workload, active_patch(True))
            return observed
        if decision.action is RequeueAction.VOLCANO_RESTART_COMMAND:
            self.api.create_volcano_command(ref.namespace, volcano_command(chain.top, incident_id, node))
            return None
        self._delete_job_pods(ref)
        return None

    def _delete_job_pods(self, ref: ObjectRef) -> int:
        """Delete every remaining pod of the PyTorchJob (its controller recreates them as one gang)."""
        pods = self.api.list_pods(ref.namespace, f"{PYTORCH_JOB_NAME_LABEL}={ref.name}")
        deleted = 0
        for pod in pods:
            owner = controller_ref(pod)
            if owner is None or owner.uid != ref.uid:
                continue  # a same-named job's leftovers, or someone else's pod with our label
            meta = pod.get("metadata") or {}
            deleted += self.api.delete_pod(ref.namespace, str(meta.get("name")), meta.get("uid"))
        return deleted

    def _wait_for(self, ref: ObjectRef, reached: Callable[[JsonObject], bool]) -> bool:
        """Poll ``ref`` until ``reached`` (True) or the observe timeout (False) on the injected clock."""
        deadline = self._clock.monotonic() + self._observe_timeout_s
        interval = POLL_INITIAL_S
        while True:
            current = self.api.get(ref)
            if current is None or reached(current):
                return current is not None
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                log.warning(
                    "requeue not observed", workload=ref.describe(), timeout_s=self._observe_timeout_s
                )
                return False
            self._sleep(min(interval, remaining))
            interval = min(interval * 2, POLL_MAX_S)

    def _record_event(self, namespace: str, body: JsonObject) -> str:
        """POST the Event; a failure only costs the Event (the restart is done and must not be undone)."""
        try:
            self.api.create_event(namespace, body)
        except API_ERRORS as error:
            if isinstance(error, KubeConflict):
                return ""  # AlreadyExists: a repeated call of this incident recorded it
            log.warning("requeue event not recorded", namespace=namespace, error=str(error))
            return f"; Event not recorded ({_describe_error(error)})"
        return ""


def _identity(ref: ObjectRef) -> str:
    return ref.uid or f"{ref.api_version}/{ref.kind}/{ref.namespace}/{ref.name}"


def _describe_error(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status}: {error.reason}"
    return f"{type(error).__name__}: {error}"
