"""The simulated Kubeflow Trainer TrainJob controller, through the official client, follows the Trainer docs.

https://www.kubeflow.org/docs/components/trainer/overview/ and the TrainJob / TrainingRuntime reference:
a TrainJob references a (Cluster)TrainingRuntime whose template is a JobSet; the TrainJob owns a JobSet of
its name, `trainer.numNodes` sizes the `node` replicated job, and `suspend` propagates to the JobSet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


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

    def jobset(self) -> dict[str, Any]:
        return cast(
            "dict[str, Any]", self.custom.get_namespaced_custom_object(*JOBSET, "ml", "jobsets", "llm")
        )

    def trainjob_conditions(self) -> dict[str, tuple[str, str]]:
        job = cast(
            "dict[str, Any]",
            self.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm"),
        )
        return {c["type"]: (c["status"], c["reason"]) for c in job.get("status", {}).get("conditions") or []}

    def live_pods(self) -> list[client.V1Pod]:
        return [p for p in self.core.list_namespaced_pod("ml").items if p.metadata.deletion_timestamp is None]


def _runtime_template() -> dict[str, Any]:
    pod = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "node", "image": "torch:2", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        }
    }
    return {
        "metadata": {"labels": {"trainer.kubeflow.org/runtime": "torch-distributed"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 1, "completions": 1, "template": pod}},
                }
            ]
        },
    }


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=4, workloads=True) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        with sim.api_client() as api:
            custom = client.CustomObjectsApi(api)
            runtime = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "torch-distributed"},
                "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": _runtime_template()},
            }
            custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", runtime)
            yield Cluster(sim, clock, custom, client.CoreV1Api(api))


def _trainjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 3}, **spec},
    }


def test_trainjob_owns_a_jobset_built_from_its_runtime_with_num_nodes(cluster: Cluster) -> None:
    """The TrainJob creates a JobSet of its own name from the ClusterTrainingRuntime's template, owned by
    it, with `numNodes` pods in the `node` replicated job."""
    created = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", _trainjob())
    assert cluster.sim.settle(10.0)
    jobset = cluster.jobset()
    owner = jobset["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "TrainJob",
        created["metadata"]["uid"],
        True,
    )
    assert jobset["metadata"]["labels"]["trainer.kubeflow.org/runtime"] == "torch-distributed"
    node_job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (node_job["parallelism"], node_job["completions"]) == (3, 3)
    pods = cluster.live_pods()
    assert len(pods) == 3 and {p.status.phase for p in pods} == {"Running"}


def test_trainjob_resources_per_node_and_image_go_on_the_trainer_container(cluster: Cluster) -> None:
    """`trainer.resourcesPerNode` replaces the runtime's resources and `trainer.image` its image on the
    trainer container `node`, as the real Trainer v2.0.0 builds its JobSet
    (tests/realkube/test_differential_workloads.py): four 4-GPU pods, not the runtime's 8 GPUs."""
    trainer = {
        "numNodes": 4,
        "image": "registry.invalid/llm:1",
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}},
    }
    cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "trainjobs", _trainjob(trainer=trainer)
    )
    assert cluster.sim.settle(10.0)
    pods = cluster.live_pods()
    assert len(pods) == 4
    (container,) = {
        (c.name, c.image, c.resources.limits["nvidia.com/gpu"]) for p in pods for c in p.spec.containers
    }
    assert container == ("node", "registry.invalid/llm:1", "4")


def test_trainjob_suspend_propagates_to_its_jobset_and_resume_restarts_pods(cluster: Cluster) -> None:
    """`spec.suspend` is copied to the JobSet (pods go; TrainJob condition Suspended) and resuming brings
    the pods back (condition Resumed)."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", _trainjob())
    assert cluster.sim.settle(10.0)
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "trainjobs", "llm", {"spec": {"suspend": True}}
    )
    cluster.advance(31)
    assert cluster.jobset()["spec"]["suspend"] is True
    assert cluster.live_pods() == []
    assert cluster.trainjob_conditions()["Suspended"] == ("True", "Suspended")
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "trainjobs", "llm", {"spec": {"suspend": False}}
    )
    assert cluster.sim.settle(10.0)
    assert cluster.jobset()["spec"]["suspend"] is False
    assert cluster.trainjob_conditions()["Suspended"] == ("False", "Resumed")
    assert len(cluster.live_pods()) == 3


def test_trainjob_created_suspended_creates_a_suspended_jobset(cluster: Cluster) -> None:
    """A TrainJob created suspended (as Kueue holds it) makes a suspended JobSet: no pods."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", _trainjob(suspend=True))
    assert cluster.sim.settle(10.0)
    assert cluster.jobset()["spec"]["suspend"] is True
    assert cluster.live_pods() == []


def test_trainjob_without_its_runtime_creates_nothing(cluster: Cluster) -> None:
    """A TrainJob naming a runtime that does not exist gets no JobSet."""
    body = _trainjob(runtimeRef={"name": "missing", "kind": "TrainingRuntime"})
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", body)
    assert cluster.sim.settle(10.0)
    assert cluster.custom.list_namespaced_custom_object(*JOBSET, "ml", "jobsets")["items"] == []


def test_trainjob_completes_when_its_jobset_completes(cluster: Cluster) -> None:
    """The JobSet's Completed condition becomes the TrainJob's Complete."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", _trainjob())
    assert cluster.sim.settle(10.0)
    for pod in cluster.live_pods():
        cluster.core.patch_namespaced_pod_status(pod.metadata.name, "ml", {"status": {"phase": "Succeeded"}})
    cluster.advance(1)
    assert cluster.trainjob_conditions()["Complete"] == ("True", "AllJobsCompleted")
