"""The controllers seen through the official ``kubernetes`` client over HTTP, as the agent sees a cluster.

Runbook-style: a training Job runs on a GPU node; the node is tainted and the pod evicted through the
Eviction API ("API-initiated Eviction"); the Job controller replaces it on the other node; a NoExecute taint
makes the taint manager delete pods without consulting budgets ("Taint based evictions").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim


@pytest.fixture
def cluster() -> Iterator[tuple[KubeSim, ManualClock]]:
    clock = ManualClock()
    with running_kube_sim(clock=clock, nodes=2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        yield sim, clock


def _job_body(gpus: int = 8) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            }
        },
    }


def _live_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod("ml", label_selector="batch.kubernetes.io/job-name=train").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def test_evicted_job_pod_is_replaced_on_another_node(cluster: tuple[KubeSim, ManualClock]) -> None:
    sim, _ = cluster
    with sim.api_client() as api:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        batch.create_namespaced_job("ml", _job_body())
        assert sim.settle()
        (first,) = _live_pods(core)
        assert first.status.phase == "Running"
        old_node = first.spec.node_name
        taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}
        core.patch_node(old_node, {"spec": {"taints": [taint]}})
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=first.metadata.name, namespace="ml"))
        core.create_namespaced_pod_eviction(first.metadata.name, "ml", eviction)
        assert sim.settle()
        (replacement,) = _live_pods(core)
        assert replacement.metadata.uid != first.metadata.uid
        assert replacement.spec.node_name != old_node
        assert replacement.status.phase == "Running"
        assert batch.read_namespaced_job("train", "ml").status.failed == 1


def test_pdb_blocks_eviction_with_429(cluster: tuple[KubeSim, ManualClock]) -> None:
    sim, _ = cluster
    with sim.api_client() as api:
        core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
        client.BatchV1Api(api).create_namespaced_job("ml", _job_body())
        policy.create_namespaced_pod_disruption_budget(
            "ml",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "train"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
            },
        )
        assert sim.settle()
        (pod,) = _live_pods(core)
        assert policy.read_namespaced_pod_disruption_budget("train", "ml").status.disruptions_allowed == 0
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace="ml"))
        with pytest.raises(ApiException) as blocked:
            core.create_namespaced_pod_eviction(pod.metadata.name, "ml", eviction)
        assert blocked.value.status == 429


def test_no_execute_taint_deletes_pods_after_grace_on_the_clock(cluster: tuple[KubeSim, ManualClock]) -> None:
    sim, clock = cluster
    with sim.api_client() as api:
        core = client.CoreV1Api(api)
        client.BatchV1Api(api).create_namespaced_job("ml", _job_body())
        assert sim.settle()
        (pod,) = _live_pods(core)
        taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoExecute"}
        core.patch_node(pod.spec.node_name, {"spec": {"taints": [taint]}})
        assert sim.settle()
        doomed = core.read_namespaced_pod(pod.metadata.name, "ml")
        assert doomed.metadata.deletion_timestamp is not None
        reasons = {c.type: c.reason for c in doomed.status.conditions}
        assert reasons["DisruptionTarget"] == "DeletionByTaintManager"
        clock.advance(30)
        assert sim.settle()
        names = [p.metadata.name for p in core.list_namespaced_pod("ml").items]
        assert pod.metadata.name not in names
