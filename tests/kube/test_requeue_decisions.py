"""Pure requeue decisions (remediation/kubernetes/requeue/decisions.py): owner chains, kinds, each kind's own failure policy, modes.

The table follows the operators' documented semantics: Job ``podFailurePolicy`` (kubernetes.io, "Handling
retriable and non-retriable pod failures with Pod failure policy"), JobSet ``failurePolicy``
(jobset.sigs.k8s.io, v1alpha2 reference), Volcano job ``policies`` (volcano.sh, "VolcanoJob"), Kubeflow
PyTorchJob replica ``restartPolicy`` / ``elasticPolicy``, Kueue ``Workload.spec.active``.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from core.clock import ManualClock
from remediation.kubernetes.requeue.decisions import (
    EVENT_REASON,
    REQUEUED_ANNOTATION,
    Decision,
    KindMode,
    ObjectRef,
    OwnerChain,
    RequeueAction,
    RequeuePolicy,
    WorkloadKind,
    already_requeued,
    claim_patch,
    controller_ref,
    deactivation_observed,
    decide,
    event_body,
    left_inactive,
    left_suspended,
    next_owner_to_follow,
    pod_owner_ref,
    suspension_observed,
    volcano_command,
    workload_of,
)

NS = "train"
DISRUPTION_RULE = {"onPodConditions": [{"type": "DisruptionTarget"}]}


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def obj(
    api_version: str,
    kind: str,
    name: str,
    *,
    spec: dict[str, Any] | None = None,
    owned_by: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "7"}
    if owned_by:
        meta["ownerReferences"] = [owned_by]
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "spec": spec or {},
        "status": status or {},
    }


def pod(owned_by: dict[str, Any] | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return obj("v1", "Pod", "p-0", owned_by=owned_by, labels=labels)


def pfp(action: str) -> dict[str, Any]:
    return {"podFailurePolicy": {"rules": [{"action": action, **DISRUPTION_RULE}]}}


def batch_job(spec: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return obj("batch/v1", "Job", "job", spec=spec, **kwargs)


def jobset(
    template_spec: dict[str, Any] | None = None,
    failure_policy: dict[str, Any] | None = None,
    restarts: int = 0,
    **kwargs: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "workers", "template": {"spec": template_spec or {}}}]
    }
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", spec=spec, status={"restarts": restarts}, **kwargs)


def child_job(parent: dict[str, Any]) -> dict[str, Any]:
    return batch_job(
        owned_by=owner(parent["apiVersion"], parent["kind"], "js", "uid-js"),
        labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"},
    )


def jobset_chain(js: dict[str, Any], workload: dict[str, Any] | None = None) -> OwnerChain:
    return OwnerChain(pod(None), (child_job(js), js), workload)


def trainjob_chain(js: dict[str, Any]) -> OwnerChain:
    trainjob = obj("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj")
    js["metadata"]["ownerReferences"] = [owner("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "uid-tj")]
    return OwnerChain(pod(None), (child_job(js), js, trainjob))


def volcano_chain(policies: list[dict[str, Any]] | None = None, task_policies: Any = None) -> OwnerChain:
    task: dict[str, Any] = {"name": "worker", "replicas": 4}
    if task_policies is not None:
        task["policies"] = task_policies
    spec: dict[str, Any] = {"tasks": [task]}
    if policies is not None:
        spec["policies"] = policies
    vcjob = obj("batch.volcano.sh/v1alpha1", "Job", "vc", spec=spec)
    return OwnerChain(pod(None, {"volcano.sh/task-spec": "worker"}), (vcjob,))


def pytorch_chain(restart_policy: str | None, elastic: bool = False) -> OwnerChain:
    worker: dict[str, Any] = {"replicas": 3}
    if restart_policy:
        worker["restartPolicy"] = restart_policy
    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": worker}}
    if elastic:
        spec["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    job = obj("kubeflow.org/v1", "PyTorchJob", "pt", spec=spec)
    return OwnerChain(pod(None, {"training.kubeflow.org/replica-type": "worker"}), (job,))


def kueue_workload(of: dict[str, Any]) -> dict[str, Any]:
    return obj(
        "kueue.x-k8s.io/v1beta1",
        "Workload",
        "wl",
        owned_by=owner(of["apiVersion"], of["kind"], of["metadata"]["name"], of["metadata"]["uid"]),
    )


QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
FAIL_JOB_TEMPLATE = pfp("FailJob")
RESTART_ON_PFP = {
    "maxRestarts": 3,
    "rules": [{"action": "RestartJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
}


def kueue_job_chain(spec: dict[str, Any] | None) -> OwnerChain:
    job = batch_job(spec, labels=QUEUE)
    return OwnerChain(pod(None), (job,), kueue_workload(job))


def kueue_jobset_chain(failure_policy: dict[str, Any] | None, template: dict[str, Any] | None) -> OwnerChain:
    js = jobset(template, failure_policy, labels=QUEUE)
    return jobset_chain(js, kueue_workload(js))


AUTO = RequeuePolicy()
NONE, SUSPEND, ACTIVE = RequeueAction.NONE, RequeueAction.SUSPEND_TOGGLE, RequeueAction.WORKLOAD_ACTIVE_TOGGLE
COMMAND, DELETE = RequeueAction.VOLCANO_RESTART_COMMAND, RequeueAction.DELETE_PODS

DECISION_TABLE: list[tuple[str, OwnerChain, WorkloadKind, RequeueAction]] = [
    ("job-ignore-replaces-pod", OwnerChain(pod(None), (batch_job(pfp("Ignore")),)), WorkloadKind.JOB, NONE),
    ("job-failjob-fails", OwnerChain(pod(None), (batch_job(pfp("FailJob")),)), WorkloadKind.JOB, NONE),
    ("job-no-policy-replaces-pod", OwnerChain(pod(None), (batch_job(),)), WorkloadKind.JOB, NONE),
    (
        "jobset-restart-rule",
        jobset_chain(jobset(FAIL_JOB_TEMPLATE, RESTART_ON_PFP)),
        WorkloadKind.JOBSET,
        NONE,
    ),
    (
        "jobset-restart-rule-budget-spent-fails",
        jobset_chain(jobset(FAIL_JOB_TEMPLATE, RESTART_ON_PFP, restarts=3)),
        WorkloadKind.JOBSET,
        NONE,
    ),
    (
        "jobset-ignore-max-restarts",
        jobset_chain(
            jobset(
                FAIL_JOB_TEMPLATE, {"rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}, restarts=9
            )
        ),
        WorkloadKind.JOBSET,
        NONE,
    ),
    (
        "jobset-failjobset-rule-first",
        jobset_chain(jobset(FAIL_JOB_TEMPLATE, {"maxRestarts": 3, "rules": [{"action": "FailJobSet"}]})),
        WorkloadKind.JOBSET,
        NONE,
    ),
    (
        "jobset-rule-for-other-replicated-job-falls-to-default-restart",
        jobset_chain(
            jobset(
                FAIL_JOB_TEMPLATE,
                {"maxRestarts": 2, "rules": [{"action": "FailJobSet", "targetReplicatedJobs": ["driver"]}]},
            )
        ),
        WorkloadKind.JOBSET,
        NONE,
    ),
    (
        "jobset-template-without-failjob",
        jobset_chain(jobset(None, RESTART_ON_PFP)),
        WorkloadKind.JOBSET,
        SUSPEND,
    ),
    (
        "jobset-template-ignore-only-replaces-pod",
        jobset_chain(jobset(pfp("Ignore"), RESTART_ON_PFP)),
        WorkloadKind.JOBSET,
        SUSPEND,
    ),
    ("jobset-no-policy-at-all", jobset_chain(jobset()), WorkloadKind.JOBSET, SUSPEND),
    ("trainjob-plain-jobset", trainjob_chain(jobset()), WorkloadKind.TRAINJOB, SUSPEND),
    (
        "trainjob-restarting-jobset",
        trainjob_chain(jobset(FAIL_JOB_TEMPLATE, RESTART_ON_PFP)),
        WorkloadKind.TRAINJOB,
        NONE,
    ),
    ("kueue-job-no-policy", kueue_job_chain(None), WorkloadKind.KUEUE, ACTIVE),
    ("kueue-job-ignore", kueue_job_chain(pfp("Ignore")), WorkloadKind.KUEUE, NONE),
    ("kueue-jobset-no-policy", kueue_jobset_chain(None, None), WorkloadKind.KUEUE, ACTIVE),
    (
        "kueue-jobset-restarting",
        kueue_jobset_chain(RESTART_ON_PFP, FAIL_JOB_TEMPLATE),
        WorkloadKind.KUEUE,
        NONE,
    ),
    (
        "queue-label-without-workload-is-plain-jobset",
        jobset_chain(jobset(labels=QUEUE)),
        WorkloadKind.JOBSET,
        SUSPEND,
    ),
    ("volcano-no-policies", volcano_chain(), WorkloadKind.VOLCANO_JOB, COMMAND),
    (
        "volcano-job-policy-restartjob",
        volcano_chain([{"event": "PodEvicted", "action": "RestartJob"}]),
        WorkloadKind.VOLCANO_JOB,
        NONE,
    ),
    (
        "volcano-events-list-form",
        volcano_chain([{"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}]),
        WorkloadKind.VOLCANO_JOB,
        NONE,
    ),
    (
        "volcano-task-any-event-abort",
        volcano_chain(None, [{"event": "*", "action": "AbortJob"}]),
        WorkloadKind.VOLCANO_JOB,
        NONE,
    ),
    (
        "volcano-policy-on-other-event-only",
        volcano_chain([{"event": "PodFailed", "action": "RestartJob"}]),
        WorkloadKind.VOLCANO_JOB,
        COMMAND,
    ),
    ("pytorch-never", pytorch_chain("Never"), WorkloadKind.PYTORCHJOB, DELETE),
    ("pytorch-onfailure", pytorch_chain("OnFailure"), WorkloadKind.PYTORCHJOB, NONE),
    ("pytorch-exitcode", pytorch_chain("ExitCode"), WorkloadKind.PYTORCHJOB, NONE),
    ("pytorch-unset-defaults-onfailure", pytorch_chain(None), WorkloadKind.PYTORCHJOB, NONE),
    ("pytorch-never-but-elastic", pytorch_chain("Never", elastic=True), WorkloadKind.PYTORCHJOB, NONE),
]


@pytest.mark.parametrize(
    ("chain", "kind", "action"),
    [case[1:] for case in DECISION_TABLE],
    ids=[case[0] for case in DECISION_TABLE],
)
def test_decision_per_kind_and_own_policy(
    chain: OwnerChain, kind: WorkloadKind, action: RequeueAction
) -> None:
    """Let the workload's own policy act where it restarts (or deliberately fails) it; else its fallback."""
    decision = decide(chain, AUTO)
    assert (decision.kind, decision.action) == (kind, action), decision.reason


@pytest.mark.parametrize("mode", [KindMode.EVICT_ONLY, KindMode.OFF])
@pytest.mark.parametrize(("name", "chain", "kind", "action"), [c for c in DECISION_TABLE if c[3].writes])
def test_evict_only_and_off_never_write(
    mode: KindMode, name: str, chain: OwnerChain, kind: WorkloadKind, action: RequeueAction
) -> None:
    """A kind set to evict-only or off gets SKIP where auto would have written."""
    decision = decide(chain, RequeuePolicy(**{kind.value: mode}))
    assert decision.action is RequeueAction.SKIP
    assert mode.value in decision.reason


def test_kueue_managed_jobset_follows_the_kueue_mode_not_the_jobset_mode() -> None:
    """Kueue owns a managed JobSet's suspend, so its mode governs: jobset=off changes nothing there."""
    chain = kueue_jobset_chain(None, None)
    assert decide(chain, RequeuePolicy(jobset=KindMode.OFF)).action is ACTIVE
    assert decide(chain, RequeuePolicy(kueue=KindMode.EVICT_ONLY)).action is RequeueAction.SKIP


def test_policy_is_frozen_strict_and_takes_the_documented_spellings() -> None:
    """RequeuePolicy: 'evict-only' parses, unknown kinds and modes are refused, instances are immutable."""
    policy = RequeuePolicy.model_validate({"volcano_job": "evict-only", "pytorchjob": "off"})
    assert policy.mode_for(WorkloadKind.VOLCANO_JOB) is KindMode.EVICT_ONLY
    assert policy.mode_for(WorkloadKind.JOBSET) is KindMode.AUTO
    with pytest.raises(pydantic.ValidationError):
        RequeuePolicy.model_validate({"rayjob": "auto"})
    with pytest.raises(pydantic.ValidationError):
        RequeuePolicy.model_validate({"jobset": "sometimes"})
    with pytest.raises(pydantic.ValidationError):
        policy.jobset = KindMode.OFF  # type: ignore[misc]


def test_owner_kinds_distinguish_volcano_job_from_batch_job() -> None:
    """Volcano's Job and batch/v1 Job share a kind name; the API group tells them apart."""
    assert ObjectRef("batch.volcano.sh/v1alpha1", "Job", NS, "a").workload_kind is WorkloadKind.VOLCANO_JOB
    assert ObjectRef("batch/v1", "Job", NS, "a").workload_kind is WorkloadKind.JOB
    assert ObjectRef("apps/v1", "ReplicaSet", NS, "a").workload_kind is None
    assert ObjectRef("batch.volcano.sh/v1alpha1", "Job", NS, "a").path == (
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NS}/jobs/a"
    )


def test_pod_owner_is_its_controller_or_its_volcano_label() -> None:
    """The controller ownerReference wins; a pod with none but ``volcano.sh/job-name`` points at that job."""
    ref = pod_owner_ref(pod(owner("kubeflow.org/v1", "PyTorchJob", "pt", "u1")))
    assert ref == ObjectRef("kubeflow.org/v1", "PyTorchJob", NS, "pt", "u1")
    by_label = pod_owner_ref(pod(None, {"volcano.sh/job-name": "vc"}))
    assert by_label is not None and by_label.workload_kind is WorkloadKind.VOLCANO_JOB
    assert pod_owner_ref(pod(None)) is None
    non_controller = pod({**owner("batch/v1", "Job", "j", "u"), "controller": False})
    assert controller_ref(non_controller) is None


def test_owner_walk_goes_job_jobset_trainjob_and_stops_elsewhere() -> None:
    """Job -> JobSet -> TrainJob are followed; a Job owned by a CronJob is itself the top."""
    js = jobset(owned_by=owner("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "uid-tj"))
    to_jobset = next_owner_to_follow(child_job(js))
    assert to_jobset is not None and to_jobset.workload_kind is WorkloadKind.JOBSET
    to_trainjob = next_owner_to_follow(js)
    assert to_trainjob is not None and to_trainjob.workload_kind is WorkloadKind.TRAINJOB
    assert next_owner_to_follow(batch_job(owned_by=owner("batch/v1", "CronJob", "c", "u"))) is None
    assert next_owner_to_follow(pytorch_chain("Never").top) is None


def test_workload_is_found_by_owner_uid() -> None:
    """The Kueue Workload of a job is the one whose ownerReference carries the job's uid."""
    job = batch_job(labels=QUEUE)
    other = kueue_workload(obj("batch/v1", "Job", "other"))
    mine = kueue_workload(job)
    assert workload_of(job, [other, mine]) == mine
    assert workload_of(job, [other]) is None


def test_claim_is_a_compare_and_set_and_carries_suspend_for_the_toggle() -> None:
    """The claim names the resourceVersion read; only the suspend toggle puts suspend: true in it."""
    top = jobset()
    toggle = claim_patch(top, "inc-1", SUSPEND)
    assert toggle == {
        "metadata": {"resourceVersion": "7", "annotations": {REQUEUED_ANNOTATION: "inc-1"}},
        "spec": {"suspend": True},
    }
    assert "spec" not in claim_patch(top, "inc-1", COMMAND)
    assert not already_requeued(top, "inc-1")
    top["metadata"]["annotations"] = {REQUEUED_ANNOTATION: "inc-1"}
    assert already_requeued(top, "inc-1") and not already_requeued(top, "inc-2")


def test_volcano_command_targets_and_is_owned_by_the_job() -> None:
    """Command{action: RestartJob, target: ownerReference}, owned by the job as vcctl creates it."""
    vcjob = volcano_chain().top
    command = volcano_command(vcjob, "inc-1", "gpu-node-3")
    assert command["apiVersion"] == "bus.volcano.sh/v1alpha1" and command["kind"] == "Command"
    assert command["action"] == "RestartJob"
    assert command["target"]["uid"] == "uid-vc" and command["target"]["kind"] == "Job"
    assert command["metadata"]["ownerReferences"] == [command["target"]]


def test_event_names_node_incident_and_action() -> None:
    """The Event on the job: reason GPUHealthRequeued, message with node, incident and action."""
    decision = Decision(WorkloadKind.JOBSET, SUSPEND, "no restart rule")
    body = event_body(
        jobset(),
        node="gpu-node-3",
        incident_id="inc-A1",
        decision=decision,
        component="c",
        now=ManualClock().now(),
    )
    assert body["reason"] == EVENT_REASON
    assert body["involvedObject"]["kind"] == "JobSet" and body["involvedObject"]["uid"] == "uid-js"
    assert all(part in body["message"] for part in ("gpu-node-3", "inc-A1", "suspend-toggle"))
    assert body["metadata"]["name"] == body["metadata"]["name"].lower()


def test_controller_reactions_are_read_from_conditions() -> None:
    """JobSet/TrainJob suspension shows as Suspended=True; a deactivated Workload as Evicted or no quota."""
    assert suspension_observed({"status": {"conditions": [{"type": "Suspended", "status": "True"}]}})
    assert not suspension_observed({"status": {"conditions": [{"type": "Suspended", "status": "False"}]}})
    pods_still_active = {
        "conditions": [{"type": "Suspended", "status": "True"}],
        "replicatedJobsStatus": [{"name": "workers", "active": 2}],
    }
    assert not suspension_observed({"status": pods_still_active})
    admitted = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}
    assert not deactivation_observed(admitted)
    admitted["status"]["conditions"].append({"type": "Evicted", "status": "True"})
    assert deactivation_observed(admitted)


def test_a_half_done_toggle_is_recognised_only_once_the_controller_reacted() -> None:
    """left_suspended / left_inactive: the first half is in the spec AND its effect is in the status."""
    suspended = {
        "spec": {"suspend": True},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
    }
    assert left_suspended(suspended)
    assert not left_suspended({"spec": {"suspend": True}, "status": {}})
    assert not left_suspended({"spec": {"suspend": False}, "status": suspended["status"]})
    evicted = {"conditions": [{"type": "Evicted", "status": "True", "reason": "InactiveWorkload"}]}
    assert left_inactive({"spec": {"active": False}, "status": evicted})
    assert not left_inactive({"spec": {"active": True}, "status": evicted})
    admitted = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    assert not left_inactive({"spec": {"active": False}, "status": admitted})


def test_a_restart_counts_for_the_same_fault_only_within_the_window() -> None:
    """requeued-at within the window names the incident; outside it, unreadable or absent -> no."""
    from datetime import UTC, datetime, timedelta

    from remediation.kubernetes.requeue.decisions import (
        REQUEUED_ANNOTATION,
        REQUEUED_AT_ANNOTATION,
        requeued_within,
    )

    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

    def job(at: str | None) -> dict[str, object]:
        annotations = {REQUEUED_ANNOTATION: "inc-a"} | ({REQUEUED_AT_ANNOTATION: at} if at else {})
        return {"metadata": {"annotations": annotations}}

    recent = (now - timedelta(seconds=30)).isoformat()
    old = (now - timedelta(seconds=900)).isoformat()
    assert requeued_within(job(recent), now, 600) == "inc-a"
    assert requeued_within(job(old), now, 600) is None
    assert requeued_within(job("yesterday-ish"), now, 600) is None
    assert requeued_within(job(None), now, 600) is None
    assert requeued_within(job(recent), now, 0) is None


def test_a_jobset_template_stored_with_an_empty_condition_status_still_matches_disruption_target() -> None:
    """The real JobSet API stores a Job template's ``onPodConditions`` pattern with ``status: ""`` when the
    user left it out (its CRD keeps the Go zero value; the Job API defaults it to "True" only once the Job is
    made, kube-apiserver 1.37 with JobSet v0.12.0, found by tests/realkube/test_runbook_jobset.py): the rule
    still matches DisruptionTarget, so the JobSet's own failure policy restarts it and we write nothing."""
    empty_status = {
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": ""}]}]
        }
    }
    restart = {
        "rules": [
            {"action": "RestartJobSetAndIgnoreMaxRestarts", "onJobFailureReasons": ["PodFailurePolicy"]}
        ]
    }
    decision = decide(jobset_chain(jobset(empty_status, restart)), AUTO)
    assert decision.action is RequeueAction.NONE, decision.reason
    assert decide(OwnerChain(pod(None), (batch_job(empty_status),)), AUTO).action is RequeueAction.NONE


def test_a_kueue_job_placed_by_topology_aware_scheduling_is_requeued_even_when_its_policy_replaces_pods() -> (
    None
):
    """Kueue's topology-aware scheduling pins each pod of an admitted workload to a node (a nodeSelector
    on the node's hostname, from the Workload's ``topologyAssignment``). A replacement pod made by the Job
    (its policy ignores the eviction) is pinned to the tainted node and stays Pending there unless Kueue's
    TASReplaceNodeOnNodeTaints moves the assignment (real Kueue 0.17 with the gate off:
    tests/realkube/test_runbook_kueue_tas.py). So such a workload gets the ``spec.active`` toggle, and Kueue
    admits it again on healthy nodes; the same Job without a topology assignment is still left to itself."""
    chain = kueue_job_chain(pfp("Ignore"))
    assert chain.workload is not None
    chain.workload["status"] = {
        "admission": {
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 4,
                    "topologyAssignment": {"levels": ["kubernetes.io/hostname"], "slices": []},
                }
            ]
        }
    }
    decision = decide(chain, AUTO)
    assert decision.action is ACTIVE, decision.reason
    assert "topology" in decision.reason
    assert decide(kueue_job_chain(pfp("Ignore")), AUTO).action is NONE
