"""The simulated Volcano job controller, through the official client over HTTP, follows Volcano's docs.

https://volcano.sh/en/docs/vcjob/ (tasks, `policies` with `event` / `action`, `maxRetry`, job phases) and
https://volcano.sh/en/docs/cli/ (`vcctl job restart` creates a `bus.volcano.sh` Command whose `target` is an
ownerReference to the Job; the job controller applies it and deletes the Command).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"


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
            "dict[str, Any]", self.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "mpi")
        )

    def phase(self) -> str:
        return str(self.job()["status"]["state"]["phase"])

    def pods(self) -> dict[str, client.V1Pod]:
        pods = self.core.list_namespaced_pod("ml").items
        return {cast(str, p.metadata.name): p for p in pods if p.metadata.deletion_timestamp is None}

    def evict(self, name: str) -> None:
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="ml"))
        self.core.create_namespaced_pod_eviction(name, "ml", eviction)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=4, workloads=True) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            yield Cluster(sim, clock, client.CustomObjectsApi(api), client.CoreV1Api(api))


def _create(cluster: Cluster, policies: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    template = {
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [
                {"name": "main", "image": "mpi:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        }
    }
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": "mpi", "namespace": "ml"},
        "spec": {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "queue": "default",
            "policies": policies or [],
            "tasks": [
                {"name": "master", "replicas": 1, "template": template},
                {"name": "worker", "replicas": 2, "template": template},
            ],
            **spec,
        },
    }
    created = cast(
        "dict[str, Any]", cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body)
    )
    assert cluster.sim.settle(10.0)
    return created


def test_tasks_become_labelled_pods_and_the_job_runs(cluster: Cluster) -> None:
    """Tasks become pods `<job>-<task>-<index>` with the volcano.sh labels and annotations; once
    minAvailable pods run the phase is Running."""
    created = _create(cluster)
    pods = cluster.pods()
    assert sorted(pods) == ["mpi-master-0", "mpi-worker-0", "mpi-worker-1"]
    worker = pods["mpi-worker-1"]
    assert worker.metadata.labels["volcano.sh/job-name"] == "mpi"
    assert worker.metadata.labels["volcano.sh/task-spec"] == "worker"
    assert worker.metadata.annotations["volcano.sh/task-index"] == "1"
    assert worker.metadata.annotations["volcano.sh/job-version"] == "0"
    owner = worker.metadata.owner_references[0]
    assert (owner.kind, owner.uid) == ("Job", created["metadata"]["uid"])
    assert cluster.phase() == "Running"
    assert cluster.job()["status"]["running"] == 3


def test_pod_evicted_policy_restart_job_recreates_every_pod(cluster: Cluster) -> None:
    """Policies: `event: PodEvicted, action: RestartJob` kills every pod, bumps version and retryCount,
    and recreates the pods (Restarting -> Pending -> Running)."""
    _create(cluster, [{"event": "PodEvicted", "action": "RestartJob"}])
    old = {name: pod.metadata.uid for name, pod in cluster.pods().items()}
    cluster.evict("mpi-worker-0")
    assert cluster.sim.settle(10.0)
    assert cluster.phase() == "Restarting"
    cluster.advance(31)
    cluster.advance(1)
    pods = cluster.pods()
    assert sorted(pods) == sorted(old)
    assert all(pods[name].metadata.uid != uid for name, uid in old.items())
    assert {p.metadata.annotations["volcano.sh/job-version"] for p in pods.values()} == {"1"}
    status = cluster.job()["status"]
    assert (status["retryCount"], status["version"], status["state"]["phase"]) == (1, 1, "Running")


def test_without_policy_an_evicted_pod_alone_is_recreated(cluster: Cluster) -> None:
    """Without a matching policy the job is synced: only the missing pod is created again."""
    _create(cluster)
    old = {name: pod.metadata.uid for name, pod in cluster.pods().items()}
    cluster.evict("mpi-worker-0")
    cluster.advance(31)
    pods = cluster.pods()
    assert pods["mpi-worker-0"].metadata.uid != old["mpi-worker-0"]
    assert pods["mpi-master-0"].metadata.uid == old["mpi-master-0"]
    assert cluster.job()["status"]["retryCount"] == 0


def test_pod_failed_policy_abort_job_kills_pods_and_aborts(cluster: Cluster) -> None:
    """Policies: `event: PodFailed, action: AbortJob` kills the pods; phase Aborting then Aborted."""
    _create(cluster, [{"event": "PodFailed", "action": "AbortJob"}])
    patch = {"status": {"phase": "Failed"}}
    cluster.core.patch_namespaced_pod_status("mpi-worker-1", "ml", patch)
    cluster.advance(31)
    assert cluster.phase() == "Aborted"
    assert cluster.pods() == {}


def test_restart_command_restarts_the_job_and_is_consumed(cluster: Cluster) -> None:
    """A `bus.volcano.sh` Command {action: RestartJob, target: ownerReference to the Job} restarts the job
    (pods recreated) and is deleted once applied."""
    created = _create(cluster)
    old = {name: pod.metadata.uid for name, pod in cluster.pods().items()}
    command = {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"generateName": "mpi-restartjob-", "namespace": "ml"},
        "action": "RestartJob",
        "target": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Job",
            "name": "mpi",
            "uid": created["metadata"]["uid"],
            "controller": True,
        },
        "reason": "gpuhealth: node gpu-node-0001 drained",
    }
    cluster.custom.create_namespaced_custom_object("bus.volcano.sh", "v1alpha1", "ml", "commands", command)
    assert cluster.sim.settle(10.0)
    commands = cluster.custom.list_namespaced_custom_object("bus.volcano.sh", "v1alpha1", "ml", "commands")
    assert commands["items"] == []
    cluster.advance(31)
    cluster.advance(1)
    pods = cluster.pods()
    assert len(pods) == 3 and all(pods[name].metadata.uid != uid for name, uid in old.items())
    assert cluster.job()["status"]["retryCount"] == 1


def test_restart_beyond_max_retry_fails_the_job(cluster: Cluster) -> None:
    """maxRetry: once retryCount has reached it, a RestartJob fails the job instead."""
    _create(cluster, [{"event": "PodEvicted", "action": "RestartJob"}], maxRetry=1)
    cluster.evict("mpi-worker-0")
    cluster.advance(31)
    cluster.advance(1)
    assert cluster.phase() == "Running"
    cluster.evict("mpi-worker-1")
    cluster.advance(31)
    assert cluster.phase() == "Failed"
