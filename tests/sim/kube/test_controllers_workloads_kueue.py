"""The simulated Kueue controllers, through the official client over HTTP, follow the Kueue docs.

https://kueue.sigs.k8s.io/docs/concepts/workload/ (a Workload per queued job, `spec.active`, conditions),
https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ (nominalQuota), https://kueue.sigs.k8s.io/docs/tasks/run/jobs/
and https://kueue.sigs.k8s.io/docs/tasks/run/jobsets/ (a job labelled `kueue.x-k8s.io/queue-name`, created
suspended, is unsuspended on admission), https://kueue.sigs.k8s.io/docs/concepts/workload/#active
(deactivation evicts with reason Deactivated, as Kueue 0.17 does; reactivation requeues).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass
class Cluster:
    sim: KubeSim
    clock: ManualClock
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    batch: client.BatchV1Api

    def advance(self, seconds: float) -> None:
        """Let the controllers react to what the test wrote, then move time."""
        assert self.sim.settle(10.0)
        self.clock.advance(seconds)
        assert self.sim.settle(10.0)

    def workloads(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, "ml", "workloads"
        )["items"]
        return items

    def workload_of(self, owner_name: str) -> dict[str, Any]:
        return next(w for w in self.workloads() if w["metadata"]["ownerReferences"][0]["name"] == owner_name)

    def live_pods(self) -> list[client.V1Pod]:
        return [p for p in self.core.list_namespaced_pod("ml").items if p.metadata.deletion_timestamp is None]


def _conditions(workload: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in workload.get("status", {}).get("conditions") or []}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=4, workloads=True) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            custom = client.CustomObjectsApi(api)
            quota = [{"name": "nvidia.com/gpu", "nominalQuota": 16}]
            cluster_queue = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterQueue",
                "metadata": {"name": "gpus"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": "h200", "resources": quota}],
                        }
                    ],
                },
            }
            custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
            local_queue = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": "ml"},
                "spec": {"clusterQueue": "gpus"},
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "localqueues", local_queue)
            yield Cluster(sim, clock, custom, client.CoreV1Api(api), client.BatchV1Api(api))


def _pod_template(run_seconds: int | None = None) -> dict[str, Any]:
    annotations = {"sim.gpuhealth.io/run-seconds": str(run_seconds)} if run_seconds else {}
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
    }


def _job(name: str, parallelism: int = 2, run_seconds: int | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {QUEUE_LABEL: "team"}},
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": _pod_template(run_seconds),
        },
    }


def test_queued_job_gets_a_workload_and_is_unsuspended_on_admission(cluster: Cluster) -> None:
    """A suspended Job with the queue-name label gets a Workload (owned by it, its pod set and queue);
    admission under the ClusterQueue's GPU quota sets QuotaReserved and Admitted and unsuspends the Job."""
    job = cluster.batch.create_namespaced_job("ml", _job("train"))
    assert cluster.sim.settle(10.0)
    workload = cluster.workload_of("train")
    assert workload["metadata"]["name"].startswith("job-train-")
    assert workload["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    assert workload["spec"]["queueName"] == "team" and workload["spec"]["active"] is True
    assert [(ps["name"], ps["count"]) for ps in workload["spec"]["podSets"]] == [("main", 2)]
    assert workload["status"]["admission"]["clusterQueue"] == "gpus"
    assert _conditions(workload)["Admitted"] == ("True", "Admitted")
    assert _conditions(workload)["QuotaReserved"] == ("True", "QuotaReserved")
    assert cluster.batch.read_namespaced_job("train", "ml").spec.suspend is False
    assert len(cluster.live_pods()) == 2


def test_workload_over_quota_waits_until_quota_is_released(cluster: Cluster) -> None:
    """A Workload that does not fit the remaining quota stays pending (its job suspended) until an admitted
    Workload finishes."""
    cluster.batch.create_namespaced_job("ml", _job("first", run_seconds=5))
    assert cluster.sim.settle(10.0)
    cluster.batch.create_namespaced_job("ml", _job("second"))
    assert cluster.sim.settle(10.0)
    assert "Admitted" not in _conditions(cluster.workload_of("second"))
    assert cluster.batch.read_namespaced_job("second", "ml").spec.suspend is True
    cluster.advance(6)
    assert _conditions(cluster.workload_of("first"))["Finished"][0] == "True"
    assert _conditions(cluster.workload_of("second"))["Admitted"][0] == "True"
    assert cluster.batch.read_namespaced_job("second", "ml").spec.suspend is False


def test_deactivation_evicts_and_suspends_then_reactivation_readmits(cluster: Cluster) -> None:
    """`spec.active: false` evicts the Workload (Evicted/Deactivated, Requeued False, QuotaReserved
    False/Pending, Admitted False/NoReservation, one eviction counted), releases the admission and suspends
    the job; `true` requeues it (Reactivated) and it is admitted again (Evicted False), as real Kueue 0.17
    does (tests/realkube/test_differential_workloads.py)."""
    cluster.batch.create_namespaced_job("ml", _job("train"))
    assert cluster.sim.settle(10.0)
    name = cluster.workload_of("train")["metadata"]["name"]
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "workloads", name, {"spec": {"active": False}}
    )
    cluster.advance(31)
    workload = cluster.workload_of("train")
    assert _conditions(workload)["Evicted"] == ("True", "Deactivated")
    assert _conditions(workload)["Requeued"] == ("False", "Deactivated")
    assert _conditions(workload)["QuotaReserved"] == ("False", "Pending")
    assert _conditions(workload)["Admitted"] == ("False", "NoReservation")
    assert workload["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "", "count": 1}
    ]
    assert "admission" not in workload["status"]
    assert cluster.batch.read_namespaced_job("train", "ml").spec.suspend is True
    assert cluster.live_pods() == []
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "workloads", name, {"spec": {"active": True}}
    )
    assert cluster.sim.settle(10.0)
    workload = cluster.workload_of("train")
    assert _conditions(workload)["Requeued"] == ("True", "Reactivated")
    assert _conditions(workload)["Admitted"] == ("True", "Admitted")
    assert _conditions(workload)["Evicted"] == ("False", "QuotaReserved")
    assert len(cluster.live_pods()) == 2


def test_kueue_keeps_an_unadmitted_job_suspended(cluster: Cluster) -> None:
    """A queued job unsuspended by hand while its Workload is not admitted is suspended again."""
    cluster.batch.create_namespaced_job("ml", _job("first"))
    cluster.batch.create_namespaced_job("ml", _job("second"))
    assert cluster.sim.settle(10.0)
    cluster.batch.patch_namespaced_job("second", "ml", {"spec": {"suspend": False}})
    assert cluster.sim.settle(10.0)
    assert cluster.batch.read_namespaced_job("second", "ml").spec.suspend is True


def test_queued_jobset_workload_has_a_pod_set_per_replicated_job_and_is_unsuspended(cluster: Cluster) -> None:
    """JobSet integration: one pod set per replicated job (replicas x parallelism pods); admission
    unsuspends the JobSet, whose child Jobs then run."""
    job_template = {"spec": {"parallelism": 1, "completions": 1, "template": _pod_template()}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 2, "template": job_template}]},
    }
    cluster.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "ml", "jobsets", jobset)
    assert cluster.sim.settle(10.0)
    workload = cluster.workload_of("js")
    assert workload["metadata"]["name"].startswith("jobset-js-")
    assert [(ps["name"], ps["count"]) for ps in workload["spec"]["podSets"]] == [("w", 2)]
    stored = cluster.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "ml", "jobsets", "js")
    assert stored["spec"]["suspend"] is False
    assert len(cluster.live_pods()) == 2


def test_workload_of_a_deleted_job_is_deleted(cluster: Cluster) -> None:
    """The Workload is owned by its job: deleting the job removes the Workload."""
    cluster.batch.create_namespaced_job("ml", _job("train"))
    assert cluster.sim.settle(10.0)
    cluster.batch.delete_namespaced_job("train", "ml")
    assert cluster.sim.settle(10.0)
    assert cluster.workloads() == []
