"""Runbook on the real stack: a Kubeflow TrainJob through the real Trainer and JobSet managers.

Five KWOK GPU nodes; a TrainJob on the ``torch-distributed`` ClusterTrainingRuntime (from the Trainer
module's manifests, admitted by Trainer's own validating webhook) with 4 nodes of 8 GPUs; the real Trainer
makes the JobSet, the real JobSet manager the Job, kube-scheduler places the pods on KWOK nodes. XID 79 on
one node: the agent taints and cordons, the central remediator evicts and restarts the TrainJob (its
runtime's JobSet has no failure policy: the suspend toggle on the TrainJob, which Trainer carries down to
the JobSet); four new pods run on the healthy nodes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from control_plane import ControlPlane
from kube_stack import Controller
from kubernetes import client
from realkube import Cluster
from stack_world import STACK_WAIT_S, StackWorld, drain_results, uids
from waiting import wait_until

from remediation.kubernetes.requeue.decisions import REQUEUED_ANNOTATION

TRAINJOB = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
NODES = 5


@pytest.fixture
def world(
    kube_stack: ControlPlane,
    jobset: Controller,
    trainer: Controller,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[StackWorld]:
    labels = {**jobset.namespace_label, **trainer.namespace_label}
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True, namespace_labels=labels)
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made
    made.close()
    cluster.close()


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(TRAINJOB[:2]),
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
        },
    }


def test_xid_79_under_a_trainjob_the_real_trainer_restarts_it_on_healthy_nodes(
    world: StackWorld, record_property: Any
) -> None:
    """XID 79 on one of a 4-node TrainJob's nodes: the remediator evicts the pod and restarts the TrainJob
    once (suspend toggle, marked with the incident); the real Trainer suspends and resumes its JobSet, four
    new pods run on the healthy nodes and none on the tainted one."""
    cluster = world.cluster
    custom = client.CustomObjectsApi(cluster.admin)
    custom.create_namespaced_custom_object(*TRAINJOB[:2], cluster.namespace, TRAINJOB[2], trainjob("llm"))
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm"}
    assert wait_until(lambda: len(cluster.running(**labels)) == 4, timeout=STACK_WAIT_S), "4 pods never ran"
    before = cluster.running(**labels)
    assert len({p["spec"]["nodeName"] for p in before}) == 4
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)

    fault = time.monotonic()
    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    news = drain_results(world.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), f"the TrainJob never ran again ({news})"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (TrainJob) {news[1][2]}")
    assert world.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    found = cast(
        "dict[str, Any]",
        custom.get_namespaced_custom_object(*TRAINJOB[:2], cluster.namespace, TRAINJOB[2], "llm"),
    )
    assert "requeued (suspend-toggle)" in news[1][2], news
    assert found["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    assert not found["spec"].get("suspend")
