"""The simulated PyTorchJob controller, through the official client over HTTP, follows the Kubeflow docs.

https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/ (Master / Worker replica
specs, pods named `<job>-<type>-<index>`, `training.kubeflow.org/*` labels) and the Training Operator's job
restart policies (https://www.kubeflow.org/docs/components/trainer/legacy-v1/reference/distributed-training/:
Always, OnFailure, Never, ExitCode with retryable exit codes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.controllers.pytorchjob import restarts_failed_pod
from sim.kube.harness import KubeSim, running_kube_sim

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


@dataclass
class Cluster:
    sim: KubeSim
    clock: ManualClock
    custom: client.CustomObjectsApi
    core: client.CoreV1Api

    def advance(self, seconds: float) -> None:
        """Let the controllers react to what the test wrote, then move time."""
        assert self.sim.settle(10.0)
        self.clock.advance(seconds)
        assert self.sim.settle(10.0)

    def job(self) -> dict[str, Any]:
        return cast(
            "dict[str, Any]", self.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "ddp")
        )

    def conditions(self) -> dict[str, tuple[str, str]]:
        return {c["type"]: (c["status"], c["reason"]) for c in self.job()["status"].get("conditions") or []}

    def pods(self) -> dict[str, client.V1Pod]:
        return {cast(str, p.metadata.name): p for p in self.core.list_namespaced_pod("ml").items}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=4, workloads=True) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            yield Cluster(sim, clock, client.CustomObjectsApi(api), client.CoreV1Api(api))


def _replica(replicas: int, policy: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": policy,
        "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ]
            },
        },
    }


def _create(cluster: Cluster, master: dict[str, Any], worker: dict[str, Any] | None = None) -> None:
    specs = {"Master": master, **({"Worker": worker} if worker else {})}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    assert cluster.sim.settle(10.0)


def test_replica_specs_become_labelled_pods_without_jobs(cluster: Cluster) -> None:
    """Master and Worker replicas become pods directly, named `<job>-<type>-<index>`, with the
    training-operator labels and the replica's restartPolicy (ExitCode runs as Never)."""
    _create(cluster, _replica(1, "OnFailure"), _replica(2, "ExitCode"))
    pods = cluster.pods()
    assert sorted(pods) == ["ddp-master-0", "ddp-worker-0", "ddp-worker-1"]
    master = pods["ddp-master-0"]
    assert master.metadata.labels["training.kubeflow.org/job-name"] == "ddp"
    assert master.metadata.labels["training.kubeflow.org/replica-type"] == "master"
    assert master.metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert pods["ddp-worker-1"].metadata.labels["training.kubeflow.org/replica-index"] == "1"
    assert master.spec.restart_policy == "OnFailure" and pods["ddp-worker-0"].spec.restart_policy == "Never"
    assert master.metadata.owner_references[0].kind == "PyTorchJob"
    assert client.BatchV1Api(cluster.core.api_client).list_namespaced_job("ml").items == []
    assert cluster.conditions()["Running"] == ("True", "PyTorchJobRunning")
    assert cluster.job()["status"]["replicaStatuses"]["Worker"]["active"] == 2


def test_evicted_pod_is_recreated_under_never_policy(cluster: Cluster) -> None:
    """A deleted (evicted) replica pod is recreated whatever its restartPolicy, with a new uid."""
    _create(cluster, _replica(1, "Never"), _replica(1, "Never"))
    old = cluster.pods()["ddp-worker-0"]
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="ddp-worker-0", namespace="ml"))
    cluster.core.create_namespaced_pod_eviction("ddp-worker-0", "ml", eviction)
    cluster.advance(31)
    new = cluster.pods()["ddp-worker-0"]
    assert new.metadata.uid != old.metadata.uid and new.status.phase == "Running"
    assert "Failed" not in cluster.conditions()


def test_exit_code_policy_restarts_on_retryable_code(cluster: Cluster) -> None:
    """ExitCode: a pod failing with a retryable code (137, SIGKILL) is deleted and recreated; condition
    Restarting (True while it is replaced, False once every replica runs again)."""
    failing = _replica(
        1, "ExitCode", {"sim.gpuhealth.io/fail-after": "5", "sim.gpuhealth.io/exit-code": "137"}
    )
    _create(cluster, _replica(1, "OnFailure"), failing)
    old_uid = cluster.pods()["ddp-worker-0"].metadata.uid
    cluster.advance(6)
    assert cluster.conditions()["Restarting"] == ("False", "PyTorchJobRestarting")
    assert cluster.conditions()["Running"][0] == "True"
    assert cluster.pods()["ddp-worker-0"].metadata.uid != old_uid
    assert "Failed" not in cluster.conditions()


def test_exit_code_policy_fails_job_on_permanent_code(cluster: Cluster) -> None:
    """ExitCode: a non-retryable code (1) fails the job."""
    failing = _replica(1, "ExitCode", {"sim.gpuhealth.io/fail-after": "5", "sim.gpuhealth.io/exit-code": "1"})
    _create(cluster, _replica(1, "OnFailure"), failing)
    cluster.advance(6)
    assert cluster.conditions()["Failed"] == ("True", "PyTorchJobFailed")


def test_never_policy_fails_job_when_a_pod_fails(cluster: Cluster) -> None:
    """Never: a Failed replica pod fails the job."""
    _create(cluster, _replica(1, "Never", {"sim.gpuhealth.io/fail-after": "5"}))
    cluster.advance(6)
    assert cluster.conditions()["Failed"] == ("True", "PyTorchJobFailed")


def test_on_failure_policy_restarts_in_place_and_master_success_completes(cluster: Cluster) -> None:
    """OnFailure: the kubelet restarts the container in place; the job succeeds when the Master does."""
    _create(
        cluster, _replica(1, "OnFailure", {"sim.gpuhealth.io/run-seconds": "5"}), _replica(1, "OnFailure")
    )
    cluster.advance(6)
    assert cluster.conditions()["Succeeded"] == ("True", "PyTorchJobSucceeded")


def test_restart_policy_table() -> None:
    """Which Failed pods are replaced: OnFailure/Always always, ExitCode on 130/137/138/143, Never never."""
    failed = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 143}}}]}}
    permanent = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]}}
    assert restarts_failed_pod("OnFailure", permanent) and restarts_failed_pod("Always", permanent)
    assert restarts_failed_pod("ExitCode", failed) and not restarts_failed_pod("ExitCode", permanent)
    assert not restarts_failed_pod("Never", failed)


def test_run_policy_suspend_deletes_pods_and_resume_recreates_them(cluster: Cluster) -> None:
    """runPolicy.suspend deletes the replica pods (Suspended) and resuming recreates them."""
    _create(cluster, _replica(1, "OnFailure"), _replica(1, "OnFailure"))
    patch = {"spec": {"runPolicy": {"suspend": True}}}
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "ddp", patch)
    cluster.advance(31)
    assert cluster.pods() == {}
    assert cluster.conditions()["Suspended"] == ("True", "PyTorchJobSuspended")
    patch = {"spec": {"runPolicy": {"suspend": False}}}
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "ddp", patch)
    cluster.advance(1)
    assert len(cluster.pods()) == 2
    assert cluster.conditions()["Suspended"][0] == "False"
