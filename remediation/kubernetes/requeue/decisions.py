"""Requeue decisions for the training jobs whose pods a drain evicted: pure, no I/O (docs/requeue.md).

An evicted pod gets the ``DisruptionTarget`` condition. Many workload controllers already react to it (Job
``podFailurePolicy``, JobSet ``failurePolicy.rules``, Volcano ``policies``, PyTorchJob ``restartPolicy``);
there the right thing is to let them. Only where the workload would otherwise sit with one pod replaced and
the rest hung in a collective do we restart it ourselves, with the documented lever for its kind. This
module walks owner chains (given the objects), classifies kinds and says what to do; the Kubernetes calls
live in ``remediation.kubernetes.requeue.api``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

JsonObject = dict[str, Any]

REQUEUED_ANNOTATION = "gpuhealth.io/requeued-incident"
REQUEUED_AT_ANNOTATION = "gpuhealth.io/requeued-at"
EVENT_REASON = "GPUHealthRequeued"
DISRUPTION_TARGET = "DisruptionTarget"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
PYTORCH_REPLICA_LABEL = "training.kubeflow.org/replica-type"
PYTORCH_JOB_NAME_LABEL = "training.kubeflow.org/job-name"


class WorkloadKind(StrEnum):
    """The workload kinds whose requeue we know; the value is the key in :class:`RequeuePolicy`."""

    JOB = "job"
    JOBSET = "jobset"
    TRAINJOB = "trainjob"
    PYTORCHJOB = "pytorchjob"
    VOLCANO_JOB = "volcano_job"
    KUEUE = "kueue"


# (API group, kind) of an ownerReference -> kind. Volcano's Job shares the kind name with batch/v1 Job.
KIND_BY_GROUP_KIND: Mapping[tuple[str, str], WorkloadKind] = {
    ("batch", "Job"): WorkloadKind.JOB,
    ("jobset.x-k8s.io", "JobSet"): WorkloadKind.JOBSET,
    ("trainer.kubeflow.org", "TrainJob"): WorkloadKind.TRAINJOB,
    ("kubeflow.org", "PyTorchJob"): WorkloadKind.PYTORCHJOB,
    ("batch.volcano.sh", "Job"): WorkloadKind.VOLCANO_JOB,
}
PLURAL_BY_KIND: Mapping[WorkloadKind, str] = {
    WorkloadKind.JOB: "jobs",
    WorkloadKind.JOBSET: "jobsets",
    WorkloadKind.TRAINJOB: "trainjobs",
    WorkloadKind.PYTORCHJOB: "pytorchjobs",
    WorkloadKind.VOLCANO_JOB: "jobs",
    WorkloadKind.KUEUE: "workloads",
}
VOLCANO_JOB_API_VERSION = "batch.volcano.sh/v1alpha1"


class KindMode(StrEnum):
    """What gpuhealth does for one kind: ``auto`` requeues when the workload will not restart itself,
    ``evict-only`` leaves it to the workload after the eviction, ``off`` leaves the kind alone entirely
    (the drain skips its pods too: they stay on the node, reported as skipped)."""

    AUTO = "auto"
    EVICT_ONLY = "evict-only"
    OFF = "off"


KEPT_REASON_PREFIX = "requeue mode off for "


def kept_reason(kind: WorkloadKind) -> str:
    """Why the drain leaves a pod of ``kind`` on the node (its mode is ``off``), as its report says."""
    return f"{KEPT_REASON_PREFIX}{kind.value}"


class RequeuePolicy(BaseModel):
    """The mode per workload kind. A Kueue-managed Job or JobSet follows ``kueue`` (Kueue owns its
    ``suspend``), a TrainJob follows ``trainjob`` (not the ``jobset`` it owns)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: KindMode = Field(default=KindMode.AUTO, description="batch/v1 Jobs (no fallback: left to the Job).")
    jobset: KindMode = Field(default=KindMode.AUTO, description="JobSets: suspend toggle when needed.")
    trainjob: KindMode = Field(default=KindMode.AUTO, description="TrainJobs: suspend toggle when needed.")
    pytorchjob: KindMode = Field(default=KindMode.AUTO, description="PyTorchJobs: delete the job's pods.")
    volcano_job: KindMode = Field(default=KindMode.AUTO, description="Volcano Jobs: a RestartJob Command.")
    kueue: KindMode = Field(default=KindMode.AUTO, description="Kueue-managed Jobs/JobSets: active toggle.")
    same_fault_window_s: float = Field(
        default=600.0,
        ge=0,
        description=(
            "A restart made for another incident this many seconds ago or less counts as this incident's: "
            "several nodes of one job failing together (one fault, one incident per node) restart it once."
        ),
    )

    @property
    def restarts_anything(self) -> bool:
        """False when no kind is ``auto``: the requeue would only read owners it may not write (and, with
        the chart's RBAC, may not even read), so the drain skips it."""
        return any(self.mode_for(kind) is KindMode.AUTO for kind in WorkloadKind)

    @property
    def keeps_any_kind(self) -> bool:
        """True when some kind is ``off``: only then must the drain read its pods' owners (to leave the
        pods of those kinds on the node), so the default policy costs the drain no extra request."""
        return any(self.mode_for(kind) is KindMode.OFF for kind in WorkloadKind)

    def mode_for(self, kind: WorkloadKind) -> KindMode:
        """The configured mode of ``kind``."""
        mode: KindMode = getattr(self, kind.value)
        return mode


class RequeueAction(StrEnum):
    """What to do to the top owner. Only the last four write."""

    NONE = "none"  # the workload's own policy reacts (or we have no lever): no write
    SKIP = "skip"  # the kind's mode is evict-only or off: no write
    SUSPEND_TOGGLE = "suspend-toggle"  # JobSet / TrainJob spec.suspend true then false
    WORKLOAD_ACTIVE_TOGGLE = "workload-active-toggle"  # Kueue Workload spec.active false then true
    VOLCANO_RESTART_COMMAND = "volcano-restart-command"  # bus.volcano.sh Command{action: RestartJob}
    DELETE_PODS = "delete-pods"  # PyTorchJob: delete the remaining pods; the operator recreates them

    @property
    def writes(self) -> bool:
        """True when carrying out this action changes the cluster."""
        return self not in (RequeueAction.NONE, RequeueAction.SKIP)


@dataclass(frozen=True)
class ObjectRef:
    """Enough to address one namespaced object and check it is still the same one (uid)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str | None = None

    @property
    def group(self) -> str:
        """The API group ("" for core)."""
        return self.api_version.rpartition("/")[0]

    @property
    def workload_kind(self) -> WorkloadKind | None:
        """The known workload kind this points at, or None."""
        return KIND_BY_GROUP_KIND.get((self.group, self.kind))

    @property
    def path(self) -> str:
        """The object's REST path (only for known workload kinds and Kueue Workloads)."""
        plural = PLURAL_BY_KIND[self.workload_kind or WorkloadKind.KUEUE]
        prefix = "/api" if not self.group else "/apis"
        return f"{prefix}/{self.api_version}/namespaces/{self.namespace}/{plural}/{self.name}"

    def describe(self) -> str:
        """``JobSet default/train`` for logs, reports and Event messages."""
        return f"{self.kind} {self.namespace}/{self.name}"


def ref_of(obj: Mapping[str, Any]) -> ObjectRef:
    """The reference of a stored object (its own apiVersion, kind and metadata)."""
    meta = obj.get("metadata") or {}
    return ObjectRef(
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        meta.get("uid"),
    )


def controller_ref(obj: Mapping[str, Any]) -> ObjectRef | None:
    """The ownerReference with ``controller: true``, addressed in the object's namespace."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            return ObjectRef(
                str(owner.get("apiVersion", "")),
                str(owner.get("kind", "")),
                str(meta.get("namespace", "")),
                str(owner.get("name", "")),
                owner.get("uid"),
            )
    return None


def pod_owner_ref(pod: Mapping[str, Any]) -> ObjectRef | None:
    """The pod's controller, or its Volcano Job from the ``volcano.sh/job-name`` label when it has none."""
    owner = controller_ref(pod)
    if owner is not None:
        return owner
    meta = pod.get("metadata") or {}
    job_name = (meta.get("labels") or {}).get(VOLCANO_JOB_LABEL)
    if job_name:
        return ObjectRef(VOLCANO_JOB_API_VERSION, "Job", str(meta.get("namespace", "")), str(job_name))
    return None


def next_owner_to_follow(obj: Mapping[str, Any]) -> ObjectRef | None:
    """The owner to fetch next when walking up from ``obj``: Job -> JobSet -> TrainJob; others are tops."""
    kind = ref_of(obj).workload_kind
    if kind not in (WorkloadKind.JOB, WorkloadKind.JOBSET):
        return None
    owner = controller_ref(obj)
    if owner is None or owner.workload_kind not in (WorkloadKind.JOBSET, WorkloadKind.TRAINJOB):
        return None
    return owner


def is_kueue_managed(obj: Mapping[str, Any]) -> bool:
    """Kueue manages Jobs and JobSets that carry its queue-name label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return ref_of(obj).workload_kind in (WorkloadKind.JOB, WorkloadKind.JOBSET) and bool(
        labels.get(KUEUE_QUEUE_LABEL)
    )


def workload_of(job: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]) -> JsonObject | None:
    """The Kueue Workload among ``workloads`` whose ownerReference is ``job`` (matched by uid)."""
    uid = (job.get("metadata") or {}).get("uid")
    for workload in workloads:
        owners = (workload.get("metadata") or {}).get("ownerReferences") or []
        if any(owner.get("uid") == uid for owner in owners):
            return dict(workload)
    return None


@dataclass(frozen=True)
class OwnerChain:
    """An evicted pod and its owners, bottom to top, plus the Kueue Workload of the top when there is one."""

    pod: JsonObject
    owners: tuple[JsonObject, ...]
    workload: JsonObject | None = None

    @property
    def top(self) -> JsonObject:
        """The job we annotate and restart (TrainJob over JobSet over Job)."""
        return self.owners[-1]

    def owner_of_kind(self, kind: WorkloadKind) -> JsonObject | None:
        """The owner of ``kind`` in the chain, if any."""
        return next((obj for obj in self.owners if ref_of(obj).workload_kind is kind), None)


@dataclass(frozen=True)
class Decision:
    """What to do about one top owner, and why (the why goes into reports and the Event)."""

    kind: WorkloadKind
    action: RequeueAction
    reason: str


class Reaction(StrEnum):
    """How a workload's own policy reacts to a pod evicted with ``DisruptionTarget``."""

    RESTARTS = "restarts"  # the whole workload restarts
    REPLACES_POD = "replaces-pod"  # only the evicted pod is replaced (enough for a lone Job)
    FAILS = "fails"  # the owner chose to fail it; we do not override that
    NOTHING = "nothing"  # nothing beyond replacing the pod: a gang stays hung, so we act


def job_rule_on_disruption(job_spec: Mapping[str, Any]) -> str | None:
    """The action of the first ``podFailurePolicy`` rule on ``DisruptionTarget`` (True), or None.

    Rules are evaluated in order and the first match wins; ``onExitCodes`` rules are not considered because
    the exit code of an evicted container is not known here. Actions: ``Ignore`` (not counted, pod
    replaced), ``FailJob``, ``FailIndex``, ``Count`` (counted against ``backoffLimit``, pod replaced).
    """
    policy = job_spec.get("podFailurePolicy") or {}
    for rule in policy.get("rules") or []:
        for pattern in rule.get("onPodConditions") or []:
            # An absent or empty status means "True": the Job API defaults it, and a JobSet stores its Job
            # templates with the empty Go zero value before any Job exists.
            if pattern.get("type") == DISRUPTION_TARGET and (pattern.get("status") or "True") == "True":
                return str(rule.get("action"))
    return None


def job_reaction(job: Mapping[str, Any]) -> Reaction:
    """A batch/v1 Job: ``FailJob``/``FailIndex`` fail it, anything else replaces the evicted pod."""
    action = job_rule_on_disruption(job.get("spec") or {})
    if action in ("FailJob", "FailIndex"):
        return Reaction.FAILS
    return Reaction.REPLACES_POD


def _replicated_job(jobset: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    for replicated in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if replicated.get("name") == name:
            return dict(replicated)
    return {}


def _first_matching_rule(
    rules: Sequence[Mapping[str, Any]], reason: str, replicated_job: str | None
) -> Mapping[str, Any] | None:
    for rule in rules:
        reasons = rule.get("onJobFailureReasons") or []
        targets = rule.get("targetReplicatedJobs") or []
        if (not reasons or reason in reasons) and (not targets or replicated_job in targets):
            return rule
    return None


def jobset_reaction(jobset: Mapping[str, Any], replicated_job: str | None) -> Reaction:
    """Whether the JobSet restarts itself when one of its pods is evicted.

    The child Job fails only if its template's ``podFailurePolicy`` says ``FailJob`` on ``DisruptionTarget``
    (reason ``PodFailurePolicy``); otherwise it just replaces the pod and the JobSet never hears of it. A
    failed child Job meets ``failurePolicy``: the first rule matching the reason and replicated job decides,
    and with no matching rule the default is ``RestartJobSet``. ``RestartJobSet`` restarts only while
    ``status.restarts < maxRestarts``; ``RestartJobSetAndIgnoreMaxRestarts`` always; ``FailJobSet`` fails.
    """
    template_spec = ((_replicated_job(jobset, replicated_job).get("template") or {}).get("spec")) or {}
    if job_rule_on_disruption(template_spec) != "FailJob":
        return Reaction.NOTHING
    failure_policy = (jobset.get("spec") or {}).get("failurePolicy") or {}
    rule = _first_matching_rule(failure_policy.get("rules") or [], "PodFailurePolicy", replicated_job)
    action = str(rule.get("action")) if rule else "RestartJobSet"
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        return Reaction.RESTARTS
    if action == "RestartJobSet":
        restarts = int((jobset.get("status") or {}).get("restarts") or 0)
        return Reaction.RESTARTS if restarts < int(failure_policy.get("maxRestarts") or 0) else Reaction.FAILS
    return Reaction.FAILS


VOLCANO_RESTARTS = ("RestartJob", "RestartTask", "RestartPod")
VOLCANO_ENDS = ("AbortJob", "TerminateJob", "CompleteJob")


def _volcano_policy_action(policies: Sequence[Mapping[str, Any]]) -> str | None:
    for policy in policies:
        events = [policy.get("event"), *(policy.get("events") or [])]
        if "PodEvicted" in events or "*" in events:
            return str(policy.get("action"))
    return None


def volcano_reaction(vcjob: Mapping[str, Any], task_name: str | None) -> Reaction:
    """A Volcano Job's ``policies`` on ``PodEvicted`` (or ``*``): the task's own policies win over the
    job's, as in Volcano. ``RestartJob``/``RestartTask``/``RestartPod`` restart, ``AbortJob``/
    ``TerminateJob``/``CompleteJob`` end it; without one the pod is recreated alone."""
    spec = vcjob.get("spec") or {}
    task: Mapping[str, Any] = next((t for t in spec.get("tasks") or [] if t.get("name") == task_name), {})
    action = _volcano_policy_action(task.get("policies") or []) or _volcano_policy_action(
        spec.get("policies") or []
    )
    if action in VOLCANO_RESTARTS:
        return Reaction.RESTARTS
    if action in VOLCANO_ENDS:
        return Reaction.FAILS
    return Reaction.NOTHING


# The training operator defaults an unset replica restartPolicy to OnFailure.
PYTORCH_DEFAULT_RESTART_POLICY = "OnFailure"


def pytorch_reaction(pytorchjob: Mapping[str, Any], replica_type: str | None) -> Reaction:
    """A PyTorchJob restarts its workers itself with ``elasticPolicy`` (torchrun re-forms the group) or a
    replica ``restartPolicy`` of ``OnFailure``/``Always``/``ExitCode`` (workers that fail when the
    collective breaks are restarted); with ``Never`` they fail and the job with them, so we act."""
    spec = pytorchjob.get("spec") or {}
    if spec.get("elasticPolicy"):
        return Reaction.RESTARTS
    replicas = spec.get("pytorchReplicaSpecs") or {}
    wanted = (replica_type or "").lower()
    replica: Mapping[str, Any] = next((v for k, v in replicas.items() if k.lower() == wanted), {})
    policy = replica.get("restartPolicy") or PYTORCH_DEFAULT_RESTART_POLICY
    return Reaction.NOTHING if policy == "Never" else Reaction.RESTARTS


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(key)
    return str(value) if value is not None else None


def reaction_of(chain: OwnerChain) -> Reaction:
    """How the chain's top owner reacts on its own to the eviction of ``chain.pod``."""
    kind = ref_of(chain.top).workload_kind
    if kind is WorkloadKind.JOB:
        return job_reaction(chain.top)
    if kind in (WorkloadKind.JOBSET, WorkloadKind.TRAINJOB):
        jobset = chain.owner_of_kind(WorkloadKind.JOBSET)
        job = chain.owner_of_kind(WorkloadKind.JOB)
        replicated = _label(job, JOBSET_REPLICATED_JOB_LABEL) if job else None
        return jobset_reaction(jobset, replicated) if jobset else Reaction.NOTHING
    if kind is WorkloadKind.VOLCANO_JOB:
        return volcano_reaction(chain.top, _label(chain.pod, VOLCANO_TASK_LABEL))
    if kind is WorkloadKind.PYTORCHJOB:
        return pytorch_reaction(chain.top, _label(chain.pod, PYTORCH_REPLICA_LABEL))
    return Reaction.NOTHING


FALLBACK_BY_KIND: Mapping[WorkloadKind, RequeueAction] = {
    WorkloadKind.JOB: RequeueAction.NONE,  # never reached: a plain Job always replaces (or fails) the pod
    WorkloadKind.JOBSET: RequeueAction.SUSPEND_TOGGLE,
    WorkloadKind.TRAINJOB: RequeueAction.SUSPEND_TOGGLE,
    WorkloadKind.PYTORCHJOB: RequeueAction.DELETE_PODS,
    WorkloadKind.VOLCANO_JOB: RequeueAction.VOLCANO_RESTART_COMMAND,
    WorkloadKind.KUEUE: RequeueAction.WORKLOAD_ACTIVE_TOGGLE,
}


def governing_kind(chain: OwnerChain) -> WorkloadKind:
    """The kind whose mode and fallback apply: Kueue for a Kueue-managed top with a Workload."""
    if chain.workload is not None and is_kueue_managed(chain.top):
        return WorkloadKind.KUEUE
    kind = ref_of(chain.top).workload_kind
    if kind is None:
        raise ValueError(f"not a workload kind: {ref_of(chain.top).describe()}")
    return kind


def placed_by_topology(workload: Mapping[str, Any] | None) -> bool:
    """Kueue admitted the workload with a ``topologyAssignment`` (topology-aware scheduling): it pins each
    pod to a node with a nodeSelector, so a pod replaced by the job's own controller goes back to the node it
    left (and stays Pending while that node is tainted) unless Kueue's TASReplaceNodeOnNodeTaints (beta,
    on by default from Kueue 0.17) moves the assignment, which the requeue cannot see from here."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    return any(a.get("topologyAssignment") for a in admission.get("podSetAssignments") or [])


def decide(chain: OwnerChain, policy: RequeuePolicy) -> Decision:
    """What to do for ``chain``'s top owner under ``policy`` (see the table in docs/requeue.md)."""
    kind = governing_kind(chain)
    mode = policy.mode_for(kind)
    if mode is not KindMode.AUTO:
        return Decision(kind, RequeueAction.SKIP, f"requeue mode of {kind.value} is {mode.value}")
    reaction = reaction_of(chain)
    explicit_rule = job_rule_on_disruption(chain.top.get("spec") or {}) is not None
    if kind is WorkloadKind.KUEUE and reaction is Reaction.REPLACES_POD and not explicit_rule:
        # The default (Count) only replaces the pod; Kueue requeues the whole workload only when evicted.
        reaction = Reaction.NOTHING
    if (
        kind is WorkloadKind.KUEUE
        and reaction is Reaction.REPLACES_POD
        and placed_by_topology(chain.workload)
    ):
        return Decision(
            kind,
            FALLBACK_BY_KIND[kind],
            "placed by Kueue's topology-aware scheduling: a replaced pod is pinned to the same node",
        )
    if reaction is not Reaction.NOTHING:
        return Decision(kind, RequeueAction.NONE, f"its own policy {reaction.value} on {DISRUPTION_TARGET}")
    return Decision(
        kind, FALLBACK_BY_KIND[kind], f"its own policy does not restart it on {DISRUPTION_TARGET}"
    )


def already_requeued(obj: Mapping[str, Any], incident_id: str) -> bool:
    """True when ``obj`` carries our annotation for this very incident."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(REQUEUED_ANNOTATION) == incident_id


def requeued_within(obj: Mapping[str, Any], now: datetime, window_s: float) -> str | None:
    """The incident that restarted ``obj`` at most ``window_s`` seconds before ``now``, if any.

    Incidents are per node, so two nodes of one job failing together are two incidents; the job must
    still restart once. A missing or unreadable time never counts (the restart goes ahead)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    incident, at = annotations.get(REQUEUED_ANNOTATION), annotations.get(REQUEUED_AT_ANNOTATION)
    if not incident or not at or window_s <= 0:
        return None
    try:
        when = datetime.fromisoformat(str(at))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return str(incident) if 0 <= (now - when).total_seconds() <= window_s else None


class Result(StrEnum):
    """How one top owner ended up after :meth:`Requeuer.requeue`."""

    REQUEUED = "requeued"  # we restarted it (annotation, action, Event)
    ALREADY_REQUEUED = "already-requeued"  # this incident restarted it before (here or on another node)
    LEFT_TO_WORKLOAD = "left-to-workload"  # its own policy reacts, or there is no lever: no write
    SKIPPED = "skipped"  # the kind's mode is evict-only or off: no write
    GONE = "gone"  # the job no longer exists
    FAILED = "failed"  # an API error; detail says which


@dataclass(frozen=True)
class Outcome:
    """One top owner: what was decided and what happened."""

    workload: ObjectRef
    kind: WorkloadKind | None
    action: RequeueAction
    result: Result
    detail: str
    # For the toggles: whether the controller was seen reacting to the first half before the second.
    observed: bool | None = None


@dataclass(frozen=True)
class RequeueReport:
    """Everything one ``requeue`` call did, one :class:`Outcome` per distinct top owner."""

    incident_id: str
    node: str
    outcomes: tuple[Outcome, ...]
    pods_without_workload: int = 0

    @property
    def requeued(self) -> tuple[ObjectRef, ...]:
        """The workloads this call restarted."""
        return tuple(o.workload for o in self.outcomes if o.result is Result.REQUEUED)

    @property
    def failed(self) -> tuple[Outcome, ...]:
        """The outcomes that ended in an API error (the caller may retry the whole call: it is idempotent)."""
        return tuple(o for o in self.outcomes if o.result is Result.FAILED)


def claim_patch(
    top: Mapping[str, Any], incident_id: str, action: RequeueAction, now: datetime | None = None
) -> JsonObject:
    """Annotate with the incident (and when), guarded by the resourceVersion read (compare-and-set: a
    concurrent claimer gets 409); for the suspend toggle the first half (``suspend: true``) goes in the same
    write."""
    version = (top.get("metadata") or {}).get("resourceVersion")
    annotations: JsonObject = {REQUEUED_ANNOTATION: incident_id}
    if now is not None:
        annotations[REQUEUED_AT_ANNOTATION] = now.astimezone(UTC).isoformat().replace("+00:00", "Z")
    body: JsonObject = {"metadata": {"resourceVersion": version, "annotations": annotations}}
    if action is RequeueAction.SUSPEND_TOGGLE:
        body["spec"] = {"suspend": True}
    return body


def release_patch(action: RequeueAction) -> JsonObject:
    """Take our annotation off again (merge patch null) and, for the suspend toggle, resume the job."""
    body: JsonObject = {
        "metadata": {"annotations": {REQUEUED_ANNOTATION: None, REQUEUED_AT_ANNOTATION: None}}
    }
    if action is RequeueAction.SUSPEND_TOGGLE:
        body["spec"] = {"suspend": False}
    return body


def suspend_patch(suspend: bool) -> JsonObject:
    """``spec.suspend`` of a JobSet or TrainJob."""
    return {"spec": {"suspend": suspend}}


def active_patch(active: bool) -> JsonObject:
    """``spec.active`` of a Kueue Workload."""
    return {"spec": {"active": active}}


def volcano_command(vcjob: Mapping[str, Any], incident_id: str, node: str) -> JsonObject:
    """A ``Command{action: RestartJob}`` targeting the Volcano Job, owned by it as ``vcctl`` makes it."""
    ref = ref_of(vcjob)
    owner = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {
            "generateName": f"{ref.name}-restartjob-",
            "namespace": ref.namespace,
            "ownerReferences": [owner],
        },
        "action": "RestartJob",
        "target": owner,
        "reason": EVENT_REASON,
        "message": f"GPU failure on node {node}, incident {incident_id}",
    }


def event_message(node: str, incident_id: str, decision: Decision) -> str:
    """The Event's message: node, incident and the action taken (and why)."""
    return (
        f"Restarted by gpuhealth after a GPU failure on node {node} (incident {incident_id}): "
        f"{decision.action.value}, because {decision.reason}"
    )


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes ``metav1.Time``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    top: Mapping[str, Any], *, node: str, incident_id: str, decision: Decision, component: str, now: datetime
) -> JsonObject:
    """A core/v1 Event on the job, named after job and incident so a retried call does not duplicate it."""
    ref = ref_of(top)
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref.name}.gpuhealth-requeue.{incident_id}".lower(),
            "namespace": ref.namespace,
        },
        "involvedObject": {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
        },
        "reason": EVENT_REASON,
        "message": event_message(node, incident_id, decision),
        "type": "Normal",
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def condition_true(obj: Mapping[str, Any], condition_type: str) -> bool:
    """True when ``status.conditions`` has ``condition_type`` with status True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition_type and c.get("status") == "True" for c in conditions)


def suspension_observed(obj: Mapping[str, Any]) -> bool:
    """JobSet and TrainJob report ``Suspended`` True once their controller has suspended the child Jobs; a
    JobSet's ``replicatedJobsStatus[].active`` (child Jobs with running or pending pods) then drops to 0,
    which is when resuming really recreates every pod."""
    statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
    return condition_true(obj, "Suspended") and all(not s.get("active") for s in statuses)


def deactivation_observed(workload: Mapping[str, Any]) -> bool:
    """Kueue reports an inactive Workload as ``Evicted`` (reason InactiveWorkload) and drops its quota."""
    return condition_true(workload, "Evicted") or not condition_true(workload, "QuotaReserved")


def left_suspended(obj: Mapping[str, Any]) -> bool:
    """Suspended by the first half of a toggle, and the controller has reacted: safe to resume."""
    return (obj.get("spec") or {}).get("suspend") is True and suspension_observed(obj)


def left_inactive(workload: Mapping[str, Any]) -> bool:
    """Deactivated by the first half of a toggle, and Kueue has evicted it: safe to reactivate."""
    return (workload.get("spec") or {}).get("active") is False and deactivation_observed(workload)
