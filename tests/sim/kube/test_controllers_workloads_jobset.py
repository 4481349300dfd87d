"""The simulated JobSet controller, seen through the official client over HTTP, follows the JobSet docs.

https://jobset.sigs.k8s.io/docs/reference/jobset.v1alpha2/ (API), https://jobset.sigs.k8s.io/docs/concepts/
(child Jobs, failure policy, success policy, suspend), and the Pod failure policy of the child Jobs
(https://kubernetes.io/docs/tasks/job/pod-failure-policy/).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.controllers import default_controllers
from sim.kube.disruption import disruption_target_condition
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim
from sim.kube.protocols import Conflict
from sim.kube.resources import ResourceRegistry
from sim.kube.store import MemoryStore
from sim.kube.workload_crds import WORKLOAD_CRDS

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
RESTART_ON_EVICTION = {
    "maxRestarts": 3,
    "rules": [{"name": "evicted", "action": "RestartJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
}


@dataclass
class Cluster:
    sim: KubeSim
    clock: ManualClock
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    batch: client.BatchV1Api

    def settle(self) -> None:
        assert self.sim.settle(10.0)

    def advance(self, seconds: float) -> None:
        """Let the controllers react to what the test wrote, then move time."""
        assert self.sim.settle(10.0)
        self.clock.advance(seconds)
        self.settle()

    def jobset(self, name: str = "train") -> dict[str, Any]:
        return cast(
            "dict[str, Any]", self.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, name)
        )

    def conditions(self, name: str = "train") -> dict[str, tuple[str, str]]:
        status = self.jobset(name).get("status") or {}
        return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}

    def live_pods(self) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod("ml").items
        return [p for p in pods if p.metadata.deletion_timestamp is None]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=6, workloads=True) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            yield Cluster(
                sim, clock, client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)
            )


def _job_template(
    parallelism: int = 2, pod_annotations: dict[str, str] | None = None, backoff_limit: int = 0
) -> dict[str, Any]:
    return {
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "completionMode": "Indexed",
            "backoffLimit": backoff_limit,
            "podFailurePolicy": {
                "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {
                "metadata": {"annotations": pod_annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        }
    }


def _jobset(name: str = "train", **spec: Any) -> dict[str, Any]:
    template = spec.pop("template", None) or _job_template()
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": template}], **spec},
    }


def test_replicated_jobs_become_named_labelled_child_jobs_whose_pods_run(cluster: Cluster) -> None:
    """Concepts: each replicated job makes `replicas` Jobs `<jobset>-<rjob>-<index>`, labelled with the
    JobSet's name, replicated job, index and restart attempt, owned by the JobSet."""
    created = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, _jobset())
    cluster.settle()
    jobs = {cast(str, j.metadata.name): j for j in cluster.batch.list_namespaced_job("ml").items}
    assert sorted(jobs) == ["train-workers-0", "train-workers-1"]
    labels = jobs["train-workers-1"].metadata.labels
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "train"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/replicatedjob-replicas"] == "2"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
    owner = jobs["train-workers-1"].metadata.owner_references[0]
    assert (owner.kind, owner.uid, owner.controller) == ("JobSet", created["metadata"]["uid"], True)
    pods = cluster.live_pods()
    assert len(pods) == 4 and {p.status.phase for p in pods} == {"Running"}
    assert {p.metadata.labels["jobset.sigs.k8s.io/jobset-name"] for p in pods} == {"train"}
    status = cluster.jobset()["status"]
    assert status["restarts"] == 0
    assert status["replicatedJobsStatus"] == [
        {"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}
    ]


def test_evicted_pod_with_restart_rule_on_pod_failure_policy_restarts_whole_jobset_once(
    cluster: Cluster,
) -> None:
    """Failure policy: the child Job fails with reason PodFailurePolicy (FailJob on DisruptionTarget), the
    rule's RestartJobSet recreates every child Job (Recreate), once; the new pods run on healthy nodes."""
    cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, _jobset(failurePolicy=RESTART_ON_EVICTION)
    )
    cluster.settle()
    old_uids = {j.metadata.uid for j in cluster.batch.list_namespaced_job("ml").items}
    victim = cluster.live_pods()[0]
    bad_node = victim.spec.node_name
    cluster.core.patch_node(bad_node, {"spec": {"unschedulable": True}})
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace="ml"))
    cluster.core.create_namespaced_pod_eviction(victim.metadata.name, "ml", eviction)
    cluster.advance(31)  # the evicted pod's grace period
    cluster.advance(31)  # the other pods, deleted by the restart
    cluster.advance(1)
    status = cluster.jobset()["status"]
    assert status["restarts"] == 1 and status["restartsCountTowardsMax"] == 1
    jobs = cluster.batch.list_namespaced_job("ml").items
    assert len(jobs) == 2 and not {j.metadata.uid for j in jobs} & old_uids
    assert {j.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] for j in jobs} == {"1"}
    pods = cluster.live_pods()
    assert len(pods) == 4 and {p.status.phase for p in pods} == {"Running"}
    assert bad_node not in {p.spec.node_name for p in pods}
    reasons = [e.reason for e in cluster.core.list_namespaced_event("ml").items]
    assert reasons.count("RestartJobSetFailurePolicyAction") == 1
    cluster.advance(60)
    assert cluster.jobset()["status"]["restarts"] == 1


def warnings(cluster: Cluster) -> list[str]:
    """Reasons of the Warning Events about the JobSet, oldest first."""
    events = cluster.core.list_namespaced_event("ml", field_selector="involvedObject.name=train").items
    return [str(e.reason) for e in events if e.type == "Warning"]


def test_a_restart_says_so_in_condition_restarting_job_set_and_its_events_as_jobset_0_12_does(
    cluster: Cluster,
) -> None:
    """JobSet v0.12.0 (tests/realkube/test_differential_workloads.py): a restart by the default action sets
    ``RestartingJobSet`` True (``DefaultFailurePolicy``) with a Warning Event of that reason beside the
    action's, and ``RestartingJobSet`` False (``JobsReady``, a Normal Event) once every Job is ready again."""
    body = _jobset(failurePolicy={"maxRestarts": 3}, template=_fail_pods_after(5))
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    cluster.advance(6)
    assert cluster.jobset()["status"]["restarts"] == 1
    assert set(warnings(cluster)) == {"DefaultFailurePolicy", "RestartJobSetFailurePolicyAction"}
    assert cluster.conditions()["RestartingJobSet"] == ("False", "JobsReady")
    events = cluster.core.list_namespaced_event("ml", field_selector="involvedObject.name=train").items
    assert [e.type for e in events if e.reason == "JobsReady"] == ["Normal"]


def test_a_named_rule_restart_and_a_failure_give_their_reasons_as_jobset_0_12_does(cluster: Cluster) -> None:
    """The reason of a restart by a rule is ``FailurePolicy_<name>`` (``failurePolicyRule0`` for an unnamed
    first rule, as the JobSet webhook names it); a failed JobSet records a Warning Event with its
    ``Failed`` reason, and ``RestartingJobSet`` turns False (``JobSetFailed``)."""
    policy = {"maxRestarts": 1, "rules": [{"action": "RestartJobSet"}]}
    body = _jobset(failurePolicy=policy, template=_fail_pods_after(5))
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    for _ in range(4):
        cluster.advance(6)
    assert cluster.conditions()["Failed"] == ("True", "ReachedMaxRestarts")
    assert cluster.conditions()["RestartingJobSet"] == ("False", "JobSetFailed")
    assert {"FailurePolicy_failurePolicyRule0", "ReachedMaxRestarts"} <= set(warnings(cluster))


def _fail_pods_after(seconds: int) -> dict[str, Any]:
    return _job_template(pod_annotations={"sim.gpuhealth.io/fail-after": str(seconds)})


def test_failjobset_rule_fails_the_jobset_with_its_reason(cluster: Cluster) -> None:
    """Failure policy: a FailJobSet rule matching the Job's failure reason fails the JobSet at once."""
    policy = {
        "maxRestarts": 5,
        "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]}],
    }
    body = _jobset(failurePolicy=policy, template=_fail_pods_after(5))
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    cluster.advance(6)
    assert cluster.conditions()["Failed"] == ("True", "FailJobSetFailurePolicyAction")
    status = cluster.jobset()["status"]
    assert status["terminalState"] == "Failed" and status["restarts"] == 0


def test_without_failure_policy_a_failed_job_fails_the_jobset(cluster: Cluster) -> None:
    """Failure policy: with none defined, any child Job failure fails the JobSet (FailedJobs)."""
    cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, _jobset(template=_fail_pods_after(5))
    )
    cluster.settle()
    cluster.advance(6)
    assert cluster.conditions()["Failed"] == ("True", "FailedJobs")


def test_restarts_stop_at_max_restarts_then_the_jobset_fails(cluster: Cluster) -> None:
    """Failure policy: RestartJobSet (also the default for unmatched failures) counts towards maxRestarts;
    when restartsCountTowardsMax reaches it the JobSet fails with ReachedMaxRestarts."""
    body = _jobset(failurePolicy={"maxRestarts": 1}, template=_fail_pods_after(5))
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    for _ in range(4):
        cluster.advance(6)
    status = cluster.jobset()["status"]
    assert status["restarts"] == 1 and status["restartsCountTowardsMax"] == 1
    assert cluster.conditions()["Failed"] == ("True", "ReachedMaxRestarts")


def test_restart_ignoring_max_restarts_does_not_count_towards_the_limit(cluster: Cluster) -> None:
    """Failure policy: RestartJobSetAndIgnoreMaxRestarts restarts without counting towards maxRestarts."""
    policy = {"maxRestarts": 0, "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}
    body = _jobset(failurePolicy=policy, template=_fail_pods_after(5))
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    for _ in range(4):
        cluster.advance(6)
    status = cluster.jobset()["status"]
    assert status["restarts"] >= 2
    assert status.get("restartsCountTowardsMax", 0) == 0
    assert "Failed" not in cluster.conditions()


def test_suspend_suspends_child_jobs_and_resume_restarts_their_pods(cluster: Cluster) -> None:
    """Suspend: `spec.suspend: true` suspends every child Job (their pods go) with condition Suspended;
    false resumes them."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, _jobset())
    cluster.settle()
    patch = {"spec": {"suspend": True}}
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "train", patch)
    cluster.advance(31)
    assert {j.spec.suspend for j in cluster.batch.list_namespaced_job("ml").items} == {True}
    assert cluster.live_pods() == []
    assert cluster.conditions()["Suspended"] == ("True", "SuspendedJobs")
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, "train", {"spec": {"suspend": False}}
    )
    cluster.settle()
    assert cluster.conditions()["Suspended"] == ("False", "ResumeJobs")
    assert len(cluster.live_pods()) == 4


def test_jobset_created_suspended_creates_suspended_jobs_without_pods(cluster: Cluster) -> None:
    """Suspend: child Jobs of a suspended JobSet are created suspended (how Kueue holds a JobSet)."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, _jobset(suspend=True))
    cluster.settle()
    assert {j.spec.suspend for j in cluster.batch.list_namespaced_job("ml").items} == {True}
    assert cluster.live_pods() == []


def test_success_policy_all_completes_when_every_job_completes(cluster: Cluster) -> None:
    """Success policy: the default (All over every replicated job) marks the JobSet Completed."""
    template = _job_template(pod_annotations={"sim.gpuhealth.io/run-seconds": "5"})
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, _jobset(template=template))
    cluster.settle()
    cluster.advance(6)
    assert cluster.conditions()["Completed"] == ("True", "AllJobsCompleted")
    assert cluster.jobset()["status"]["terminalState"] == "Completed"


def test_success_policy_any_on_a_target_completes_with_the_first_job(cluster: Cluster) -> None:
    """Success policy: operator Any with targetReplicatedJobs completes once one targeted Job completes."""
    quick = _job_template(parallelism=1, pod_annotations={"sim.gpuhealth.io/run-seconds": "5"})
    body = _jobset(successPolicy={"operator": "Any", "targetReplicatedJobs": ["driver"]})
    body["spec"]["replicatedJobs"].append({"name": "driver", "replicas": 1, "template": quick})
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    cluster.settle()
    assert "Completed" not in cluster.conditions()
    cluster.advance(6)
    assert cluster.conditions()["Completed"] == ("True", "AllJobsCompleted")


def test_workload_controllers_are_registered_and_switchable() -> None:
    """The workload controllers are default controllers that can be left out by name like the others."""
    from sim.kube.controllers import CONTROLLER_NAMES, WORKLOAD_CONTROLLER_NAMES

    assert set(WORKLOAD_CONTROLLER_NAMES) <= set(CONTROLLER_NAMES)
    enabled = [name for name in CONTROLLER_NAMES if name != "jobset"]
    with running_kube_sim(clock=ManualClock(), nodes=1, workloads=True, controllers=enabled) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, VERSION, "ml", PLURAL, _jobset()
            )
            assert sim.settle(10.0)
            assert client.BatchV1Api(api).list_namespaced_job("ml").items == []
            sim.manager.enable("jobset")
            assert sim.settle(10.0)
            assert len(client.BatchV1Api(api).list_namespaced_job("ml").items) == 2


def test_without_workloads_the_custom_resources_are_not_served() -> None:
    """`KubeSim()` without `workloads=True` serves no JobSet API, and its controllers stay idle."""
    with running_kube_sim(clock=ManualClock()) as sim, sim.api_client() as api:
        with pytest.raises(client.ApiException) as caught:
            client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL)
        assert caught.value.status == 404
        assert sim.settle(10.0)


class _RacingStore(MemoryStore):
    """A store where another client wins the next JobSet write once armed (what a concurrent PATCH of the
    JobSet, e.g. an annotation, does to a controller's status update)."""

    armed = False

    def update(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        if self.armed and resource == "jobsets.jobset.x-k8s.io":
            self.armed = False
            raise Conflict("another client wrote the JobSet first")
        return super().update(resource, obj)


def test_restart_whose_status_write_loses_a_race_is_decided_again_and_counted_once() -> None:
    """A restart deletes the child Jobs only after `status.restarts` is stored, so a lost status write
    neither loses the restart nor doubles it."""
    clock = ManualClock()
    store = _RacingStore(ResourceRegistry.with_builtins(WORKLOAD_CRDS), clock)
    store.create("namespaces", {"metadata": {"name": "ml"}})
    build_fleet(store, 4)
    controllers = default_controllers()

    def settle() -> None:
        for _ in range(12):
            for controller in controllers:
                controller.reconcile(store)

    store.create("jobsets.jobset.x-k8s.io", _jobset(failurePolicy=RESTART_ON_EVICTION))
    settle()
    victim = store.list("pods", "ml")[0]
    victim["status"]["conditions"].append(
        disruption_target_condition("EvictionByEvictionAPI", "Eviction API: evicting", "2026-01-01T00:00:00Z")
    )
    store.update("pods", victim)
    store.mark_deleting("pods", "ml", victim["metadata"]["name"], 30)
    store.armed = True
    clock.advance(31)
    settle()
    clock.advance(31)
    settle()
    jobset = store.get("jobsets.jobset.x-k8s.io", "ml", "train")
    assert jobset is not None and jobset["status"]["restarts"] == 1
    jobs = store.list("jobs.batch", "ml")
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for j in jobs} == {"1"}
    assert len(jobs) == 2
