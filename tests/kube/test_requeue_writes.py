"""The requeue's writes on the emulated API server (workload CRDs registered, controllers off).

With no controller running, what the Requeuer does is exactly what the store shows: suspend toggled, active
toggled, a Volcano Command created, pods deleted, the incident annotation and the Event. Each fallback is
checked there; so are the cases that must write nothing, and "one restart per incident".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.clock import ManualClock
from remediation.kubernetes.requeue.api import RequeueApi, Requeuer, WriteConflict
from remediation.kubernetes.requeue.decisions import (
    EVENT_REASON,
    REQUEUED_ANNOTATION,
    KindMode,
    RequeueAction,
    RequeuePolicy,
    RequeueReport,
    Result,
    ref_of,
)
from sim.kube.harness import KubeSim, running_kube_sim
from sim.kube.workload_crds import WORKLOAD_CRDS

NS = "train"
NODE = "gpu-node-3"
INCIDENT = "inc-gpu-node-3-20261202T140000Z-ab12"
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
TRAINJOB_KEY = "trainjobs.trainer.kubeflow.org"
WORKLOAD_KEY = "workloads.kueue.x-k8s.io"
VCJOB_KEY = "jobs.batch.volcano.sh"
COMMAND_KEY = "commands.bus.volcano.sh"
PYTORCH_KEY = "pytorchjobs.kubeflow.org"
QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
RESTART_ON_EVICTION = {
    "failurePolicy": {
        "maxRestarts": 3,
        "rules": [{"action": "RestartJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }
}
FAIL_ON_EVICTION = {
    "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
}


class ClockSleep:
    """The Requeuer's injected sleep: moves the emulator's manual clock instead of waiting."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.fixture
def kube(clock: ManualClock) -> Iterator[KubeSim]:
    """A bare API server serving the workload CRDs, with the ``train`` namespace."""
    with running_kube_sim(clock=clock, controllers=False, custom_resources=WORKLOAD_CRDS) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


@pytest.fixture
def make_requeuer(kube: KubeSim, clock: ManualClock) -> Iterator[Callable[..., Requeuer]]:
    """Requeuers against the emulator (auto for every kind unless ``policy=``); clients closed at the end."""
    clients = []

    def build(policy: RequeuePolicy | None = None, sleep: Callable[[float], None] | None = None) -> Requeuer:
        api_client = kube.api_client()
        clients.append(api_client)
        return Requeuer(
            api_client,
            policy=policy or RequeuePolicy(),
            clock=clock,
            sleep=sleep or ClockSleep(clock),
            observe_timeout_s=2.0,
        )

    yield build
    for api_client in clients:
        api_client.close()


def create(kube: KubeSim, key: str, api_version: str, kind: str, name: str, **fields: Any) -> dict[str, Any]:
    """Store an object in ``NS``; ``labels``/``owner`` go to metadata, the rest at the top level."""
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if "labels" in fields:
        meta["labels"] = fields.pop("labels")
    if "owner" in fields:
        parent = fields.pop("owner")
        meta["ownerReferences"] = [
            {
                "apiVersion": parent["apiVersion"],
                "kind": parent["kind"],
                "name": parent["metadata"]["name"],
                "uid": parent["metadata"]["uid"],
                "controller": True,
            }
        ]
    stored: dict[str, Any] = kube.store.create(
        key, {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}
    )
    return stored


def evicted_pod(
    parent: dict[str, Any], name: str = "worker-0", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod as the drain listed it before evicting it (not in the store any more)."""
    meta = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "labels": labels or {},
        "ownerReferences": [
            {
                "apiVersion": parent["apiVersion"],
                "kind": parent["kind"],
                "name": parent["metadata"]["name"],
                "uid": parent["metadata"]["uid"],
                "controller": True,
            }
        ],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": NODE}}


def make_jobset(
    kube: KubeSim, name: str = "llm", extra: dict[str, Any] | None = None, **fields: Any
) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "t"}]}}}}
    spec = {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": template}], "suspend": False}
    spec |= extra or {}
    return create(kube, JOBSET_KEY, "jobset.x-k8s.io/v1alpha2", "JobSet", name, spec=spec, **fields)


def make_child_job(
    kube: KubeSim, parent: dict[str, Any], spec: dict[str, Any] | None = None, index: int = 0
) -> dict[str, Any]:
    job_spec = {"template": {"spec": {"containers": [{"name": "t", "image": "t"}], "restartPolicy": "Never"}}}
    job_spec |= spec or {}
    name = f"{parent['metadata']['name']}-workers-{index}"
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}
    return create(kube, "jobs.batch", "batch/v1", "Job", name, spec=job_spec, owner=parent, labels=labels)


def make_volcano_job(kube: KubeSim, policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": 4, "tasks": [{"name": "worker", "replicas": 4}]}
    if policies:
        spec["policies"] = policies
    return create(kube, VCJOB_KEY, "batch.volcano.sh/v1alpha1", "Job", "vc-train", spec=spec)


def stored(kube: KubeSim, key: str, obj: dict[str, Any]) -> dict[str, Any]:
    current = kube.store.get(key, NS, obj["metadata"]["name"])
    assert current is not None
    return current


def annotation(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(REQUEUED_ANNOTATION)


def requeue_events(kube: KubeSim) -> list[dict[str, Any]]:
    return [e for e in kube.store.list("events", NS) if e.get("reason") == EVENT_REASON]


def record_spec_field(kube: KubeSim, key: str, field: str) -> list[Any]:
    """Every value ``spec[field]`` of objects under ``key`` takes, in commit order."""
    seen: list[Any] = []

    def listener(_type: str, resource: str, obj: dict[str, Any]) -> None:
        if resource == key:
            seen.append((obj.get("spec") or {}).get(field))

    kube.store.add_listener(listener)
    return seen


def only(report: RequeueReport) -> tuple[RequeueAction, Result]:
    (outcome,) = report.outcomes
    return outcome.action, outcome.result


def test_jobset_fallback_suspends_then_resumes_annotates_and_records_an_event(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """A JobSet whose policy does not restart on eviction: suspend true then false, annotation, Event."""
    jobset = make_jobset(kube)
    job = make_child_job(kube, jobset)
    suspends = record_spec_field(kube, JOBSET_KEY, "suspend")
    report = make_requeuer().requeue([evicted_pod(job)], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.SUSPEND_TOGGLE, Result.REQUEUED)
    assert report.outcomes[0].observed is False  # no JobSet controller here to report Suspended
    assert suspends == [True, False]
    after = stored(kube, JOBSET_KEY, jobset)
    assert annotation(after) == INCIDENT and after["spec"]["suspend"] is False
    (event,) = requeue_events(kube)
    assert event["involvedObject"]["name"] == "llm" and event["involvedObject"]["kind"] == "JobSet"
    assert NODE in event["message"] and INCIDENT in event["message"] and "suspend-toggle" in event["message"]


def test_trainjob_fallback_toggles_the_trainjob_not_its_jobset(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """TrainJob owns the JobSet: the suspend toggle and the annotation go on the TrainJob."""
    trainjob = create(
        kube, TRAINJOB_KEY, "trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", spec={"suspend": False}
    )
    jobset = make_jobset(kube, owner=trainjob)
    job = make_child_job(kube, jobset)
    suspends = record_spec_field(kube, TRAINJOB_KEY, "suspend")
    report = make_requeuer().requeue([evicted_pod(job)], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.SUSPEND_TOGGLE, Result.REQUEUED)
    assert suspends == [True, False]
    assert annotation(stored(kube, TRAINJOB_KEY, trainjob)) == INCIDENT
    assert (
        stored(kube, JOBSET_KEY, jobset)["metadata"]["resourceVersion"]
        == jobset["metadata"]["resourceVersion"]
    )


def test_kueue_fallback_deactivates_then_reactivates_the_workload(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """A Kueue-managed JobSet: Workload.spec.active false then true; the JobSet's suspend is Kueue's."""
    jobset = make_jobset(kube, labels=QUEUE)
    job = make_child_job(kube, jobset)
    workload = create(
        kube,
        WORKLOAD_KEY,
        "kueue.x-k8s.io/v1beta1",
        "Workload",
        "jobset-llm",
        spec={"active": True},
        owner=jobset,
    )
    actives = record_spec_field(kube, WORKLOAD_KEY, "active")
    suspends = record_spec_field(kube, JOBSET_KEY, "suspend")
    report = make_requeuer().requeue([evicted_pod(job)], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.WORKLOAD_ACTIVE_TOGGLE, Result.REQUEUED)
    assert actives == [False, True]
    assert stored(kube, WORKLOAD_KEY, workload)["spec"]["active"] is True
    assert suspends == [False]  # only the claim (annotation) touched the JobSet
    assert annotation(stored(kube, JOBSET_KEY, jobset)) == INCIDENT


def test_volcano_fallback_creates_one_restart_command(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """A Volcano Job without a PodEvicted policy gets Command{RestartJob} targeting it."""
    vcjob = make_volcano_job(kube)
    report = make_requeuer().requeue(
        [evicted_pod(vcjob, labels={"volcano.sh/job-name": "vc-train"})], incident_id=INCIDENT, node=NODE
    )
    assert only(report) == (RequeueAction.VOLCANO_RESTART_COMMAND, Result.REQUEUED)
    (command,) = kube.store.list(COMMAND_KEY, NS)
    assert command["action"] == "RestartJob"
    assert command["target"]["uid"] == vcjob["metadata"]["uid"]
    assert annotation(stored(kube, VCJOB_KEY, vcjob)) == INCIDENT


def test_pytorchjob_fallback_deletes_the_jobs_remaining_pods_only(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """restartPolicy Never: every remaining pod of that PyTorchJob is deleted; other pods are untouched."""
    spec = {"pytorchReplicaSpecs": {"Worker": {"replicas": 3, "restartPolicy": "Never"}}}
    job = create(kube, PYTORCH_KEY, "kubeflow.org/v1", "PyTorchJob", "pt", spec=spec)
    labels = {"training.kubeflow.org/job-name": "pt", "training.kubeflow.org/replica-type": "worker"}
    container = {"spec": {"containers": [{"name": "t", "image": "t"}]}}
    for index in (1, 2):
        create(kube, "pods", "v1", "Pod", f"pt-worker-{index}", labels=labels, owner=job, **container)
    create(kube, "pods", "v1", "Pod", "bystander", labels=labels, **container)  # our label, not our owner
    report = make_requeuer().requeue(
        [evicted_pod(job, "pt-worker-0", labels)], incident_id=INCIDENT, node=NODE
    )
    assert only(report) == (RequeueAction.DELETE_PODS, Result.REQUEUED)
    remaining = {
        p["metadata"]["name"] for p in kube.store.list("pods", NS) if "deletionTimestamp" not in p["metadata"]
    }
    assert remaining == {"bystander"}


@pytest.mark.parametrize(
    "case", ["jobset-restart-rule", "volcano-restartjob", "pytorch-onfailure", "plain-job"]
)
def test_workloads_that_restart_themselves_get_no_write(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], case: str
) -> None:
    """Where the workload's own policy reacts to DisruptionTarget, nothing is written at all."""
    if case == "jobset-restart-rule":
        pod = evicted_pod(
            make_child_job(kube, make_jobset(kube, extra=RESTART_ON_EVICTION), FAIL_ON_EVICTION)
        )
        # The child Job's podFailurePolicy comes from the JobSet template: put it there too.
        jobset = stored(kube, JOBSET_KEY, {"metadata": {"name": "llm"}})
        jobset["spec"]["replicatedJobs"][0]["template"]["spec"] |= FAIL_ON_EVICTION
        kube.store.update(JOBSET_KEY, jobset)
    elif case == "volcano-restartjob":
        pod = evicted_pod(make_volcano_job(kube, [{"event": "PodEvicted", "action": "RestartJob"}]))
    elif case == "pytorch-onfailure":
        spec = {"pytorchReplicaSpecs": {"Worker": {"replicas": 3, "restartPolicy": "OnFailure"}}}
        pytorchjob = create(kube, PYTORCH_KEY, "kubeflow.org/v1", "PyTorchJob", "pt", spec=spec)
        pod = evicted_pod(pytorchjob, labels={"training.kubeflow.org/replica-type": "worker"})
    else:
        job_spec = {
            "template": {"spec": {"containers": [{"name": "t", "image": "t"}], "restartPolicy": "Never"}}
        }
        pod = evicted_pod(create(kube, "jobs.batch", "batch/v1", "Job", "plain", spec=job_spec))
    version_before = kube.store.resource_version
    requeuer = make_requeuer()
    report = requeuer.requeue([pod], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.NONE, Result.LEFT_TO_WORKLOAD)
    assert requeuer.api.writes_total == 0
    assert kube.store.resource_version == version_before


@pytest.mark.parametrize("mode", [KindMode.EVICT_ONLY, KindMode.OFF])
def test_evict_only_and_off_write_nothing(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], mode: KindMode
) -> None:
    """A Volcano job that auto would restart is left alone when its kind is evict-only or off."""
    pod = evicted_pod(make_volcano_job(kube))
    version_before = kube.store.resource_version
    report = make_requeuer(RequeuePolicy(volcano_job=mode)).requeue([pod], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.SKIP, Result.SKIPPED)
    assert kube.store.resource_version == version_before and kube.store.list(COMMAND_KEY, NS) == []


def test_many_pods_of_one_job_and_a_second_call_restart_it_once(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Four evicted pods of one Volcano job, then the same incident again (a second node): one Command."""
    vcjob = make_volcano_job(kube)
    pods = [evicted_pod(vcjob, f"w-{i}") for i in range(4)]
    first = make_requeuer().requeue(pods, incident_id=INCIDENT, node=NODE)
    second = make_requeuer().requeue(pods[:1], incident_id=INCIDENT, node="gpu-node-4")
    assert only(first) == (RequeueAction.VOLCANO_RESTART_COMMAND, Result.REQUEUED)
    assert only(second)[1] is Result.ALREADY_REQUEUED
    assert len(kube.store.list(COMMAND_KEY, NS)) == 1 and len(requeue_events(kube)) == 1


def test_a_new_incident_after_the_fault_window_restarts_the_same_job_again(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], clock: ManualClock
) -> None:
    """The annotation dedupes per fault, not forever: an incident after the window restarts the job again."""
    vcjob = make_volcano_job(kube)
    make_requeuer().requeue([evicted_pod(vcjob)], incident_id=INCIDENT, node=NODE)
    clock.advance(RequeuePolicy().same_fault_window_s + 1)
    report = make_requeuer().requeue([evicted_pod(vcjob)], incident_id="inc-later", node=NODE)
    assert only(report)[1] is Result.REQUEUED
    assert len(kube.store.list(COMMAND_KEY, NS)) == 2
    assert annotation(stored(kube, VCJOB_KEY, vcjob)) == "inc-later"


def test_two_nodes_failing_together_restart_their_job_once_though_their_incidents_differ(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], clock: ManualClock
) -> None:
    """Incidents are per node: gpu-node-3 and gpu-node-4 of one job fail a minute apart -> one restart."""
    vcjob = make_volcano_job(kube)
    first = make_requeuer().requeue([evicted_pod(vcjob, "w-0")], incident_id="inc-node-3", node=NODE)
    clock.advance(60)
    second = make_requeuer().requeue([evicted_pod(vcjob, "w-1")], incident_id="inc-node-4", node="gpu-node-4")
    assert only(first)[1] is Result.REQUEUED
    assert only(second)[1] is Result.ALREADY_REQUEUED
    assert "inc-node-3" in second.outcomes[0].detail
    assert len(kube.store.list(COMMAND_KEY, NS)) == 1 and len(requeue_events(kube)) == 1


@pytest.mark.parametrize("round_", range(3))
def test_two_agents_at_once_restart_a_job_once(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], round_: int
) -> None:
    """Two nodes of one job fail in one incident; their agents requeue at the same moment: one restart."""
    vcjob = make_volcano_job(kube)
    jobset = make_jobset(kube)
    pods = [evicted_pod(vcjob), evicted_pod(make_child_job(kube, jobset))]
    requeuers = [make_requeuer(), make_requeuer()]
    start = threading.Barrier(2)
    reports: list[RequeueReport] = []

    def agent(requeuer: Requeuer, node: str) -> None:
        start.wait(timeout=10)
        reports.append(requeuer.requeue(pods, incident_id=INCIDENT, node=node))

    threads = [threading.Thread(target=agent, args=(r, f"gpu-node-{i}")) for i, r in enumerate(requeuers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    results = sorted(o.result.value for report in reports for o in report.outcomes)
    assert results == ["already-requeued", "already-requeued", "requeued", "requeued"], round_
    assert len(kube.store.list(COMMAND_KEY, NS)) == 1 and len(requeue_events(kube)) == 2


def test_the_claim_is_refused_when_the_job_changed_since_it_was_read(kube: KubeSim) -> None:
    """The annotation write carries the resourceVersion read: a stale one is a 409, not a second claim."""
    vcjob = make_volcano_job(kube)
    api_client = kube.api_client()
    try:
        api = RequeueApi(api_client, field_manager="test", request_timeout_s=5.0)
        body = {
            "metadata": {"resourceVersion": vcjob["metadata"]["resourceVersion"], "annotations": {"a": "1"}}
        }
        api.merge_patch(ref_of(vcjob), body)
        with pytest.raises(WriteConflict):
            api.merge_patch(ref_of(vcjob), body)
    finally:
        api_client.close()


def test_pods_without_a_known_workload_are_counted_not_touched(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """A bare pod, a ReplicaSet's pod and a pod whose job is gone: no outcome, counted, no write."""
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "uid": "u-rs"}}
    gone = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "gone", "uid": "u-g"},
    }
    bare = evicted_pod(replicaset)
    bare["metadata"]["ownerReferences"] = []
    version_before = kube.store.resource_version
    report = make_requeuer().requeue(
        [bare, evicted_pod(replicaset), evicted_pod(gone)], incident_id=INCIDENT, node=NODE
    )
    assert report.outcomes == () and report.pods_without_workload == 3
    assert kube.store.resource_version == version_before


def test_an_api_failure_is_reported_and_a_retry_completes_it(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Command creation refused (503): FAILED with the status; the call is safe to repeat and then works."""
    vcjob = make_volcano_job(kube)
    kube.faults.inject(verb="create", resource=COMMAND_KEY, status=503, times=1)
    failed = make_requeuer().requeue([evicted_pod(vcjob)], incident_id=INCIDENT, node=NODE)
    assert only(failed)[1] is Result.FAILED and "503" in failed.outcomes[0].detail
    assert kube.store.list(COMMAND_KEY, NS) == []
    retried = make_requeuer().requeue([evicted_pod(vcjob)], incident_id=INCIDENT, node=NODE)
    assert only(retried)[1] is Result.REQUEUED
    assert len(kube.store.list(COMMAND_KEY, NS)) == 1


def test_a_failed_resume_does_not_leave_the_jobset_suspended(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer], clock: ManualClock
) -> None:
    """The resume (suspend: false) is refused: the claim is released, which resumes the JobSet, and the
    outcome is FAILED so the caller retries the incident."""
    job = make_child_job(kube, make_jobset(kube))
    injected: list[bool] = []

    def sleep_then_refuse_the_next_patch(seconds: float) -> None:
        # Runs while the Requeuer waits for the suspension to be observed: after the claim, before the resume.
        if not injected:
            kube.faults.inject(verb="patch", resource=JOBSET_KEY, status=503, times=1)
            injected.append(True)
        clock.advance(seconds)

    report = make_requeuer(sleep=sleep_then_refuse_the_next_patch).requeue(
        [evicted_pod(job)], incident_id=INCIDENT, node=NODE
    )
    after = stored(kube, JOBSET_KEY, {"metadata": {"name": "llm"}})
    assert only(report)[1] is Result.FAILED and "claim released" in report.outcomes[0].detail
    assert after["spec"]["suspend"] is False and annotation(after) is None


def test_an_event_failure_keeps_the_restart(kube: KubeSim, make_requeuer: Callable[..., Requeuer]) -> None:
    """The Event is refused (503) after the Command: still REQUEUED and claimed, so no second restart."""
    vcjob = make_volcano_job(kube)
    kube.faults.inject(verb="create", resource="events", status=503, times=1)
    report = make_requeuer().requeue([evicted_pod(vcjob)], incident_id=INCIDENT, node=NODE)
    assert only(report)[1] is Result.REQUEUED and "Event not recorded" in report.outcomes[0].detail
    assert annotation(stored(kube, VCJOB_KEY, vcjob)) == INCIDENT
    assert len(kube.store.list(COMMAND_KEY, NS)) == 1


def suspended_by_an_interrupted_call(kube: KubeSim, *, observed: bool) -> dict[str, Any]:
    """A JobSet annotated for INCIDENT and left at suspend: true, as a call that died mid-toggle leaves it."""
    jobset = make_jobset(kube)
    make_child_job(kube, jobset)
    jobset["metadata"]["annotations"] = {REQUEUED_ANNOTATION: INCIDENT}
    jobset["spec"]["suspend"] = True
    jobset = kube.store.update(JOBSET_KEY, jobset)
    if observed:
        jobset["status"] = {
            "conditions": [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs"}]
        }
        jobset = kube.store.update(JOBSET_KEY, jobset)
    return jobset


def test_a_toggle_left_half_done_is_resumed_by_the_next_call(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Annotated, suspended and Suspended=True: the repeated call resumes it instead of leaving it stopped."""
    jobset = suspended_by_an_interrupted_call(kube, observed=True)
    job = kube.store.get("jobs.batch", NS, "llm-workers-0")
    assert job is not None
    report = make_requeuer().requeue([evicted_pod(job)], incident_id=INCIDENT, node=NODE)
    assert only(report)[1] is Result.ALREADY_REQUEUED and "resumed" in report.outcomes[0].detail
    assert stored(kube, JOBSET_KEY, jobset)["spec"]["suspend"] is False


def test_a_toggle_not_yet_observed_is_left_to_its_claimer(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Annotated and suspended but the controller has not reacted: the claimer may still be waiting."""
    jobset = suspended_by_an_interrupted_call(kube, observed=False)
    job = kube.store.get("jobs.batch", NS, "llm-workers-0")
    assert job is not None
    version_before = kube.store.resource_version
    report = make_requeuer().requeue([evicted_pod(job)], incident_id=INCIDENT, node=NODE)
    assert only(report) == (RequeueAction.SUSPEND_TOGGLE, Result.ALREADY_REQUEUED)
    assert stored(kube, JOBSET_KEY, jobset)["spec"]["suspend"] is True
    assert kube.store.resource_version == version_before


def test_owners_that_cannot_be_read_are_reported_failed(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Reading the owner is forbidden (403, e.g. RBAC for that kind not granted): a FAILED outcome, no write."""
    vcjob = make_volcano_job(kube)
    kube.faults.inject(verb="get", resource=VCJOB_KEY, status=403, times=1)
    version_before = kube.store.resource_version
    report = make_requeuer().requeue([evicted_pod(vcjob)], incident_id=INCIDENT, node=NODE)
    (outcome,) = report.failed
    assert outcome.workload.name == "vc-train" and "403" in outcome.detail
    assert kube.store.resource_version == version_before


def test_the_owners_of_a_gang_are_read_once_per_call(
    kube: KubeSim, make_requeuer: Callable[..., Requeuer]
) -> None:
    """Four evicted pods, each of its own child Job of one JobSet: 4 Job reads + 1 JobSet read, no more."""
    jobset = make_jobset(kube)
    pods = [evicted_pod(make_child_job(kube, jobset, index=index), f"w-{index}") for index in range(4)]
    requeuer = make_requeuer(RequeuePolicy(jobset=KindMode.EVICT_ONLY))  # reads only
    report = requeuer.requeue(pods, incident_id=INCIDENT, node=NODE)
    assert len(report.outcomes) == 1
    assert requeuer.api.requests_total == 5
