"""Runbook on the real stack: an inference Deployment behind a PodDisruptionBudget, and the node's recovery.

Five KWOK GPU nodes; a 4-replica Deployment (each replica a whole node) with a budget of one disruption; the
real Deployment and ReplicaSet controllers, the disruption controller, kube-scheduler. XID 79 on one
replica's node: the agent taints and cordons, the central remediator evicts within the budget, the
ReplicaSet makes a new replica that the scheduler places on the spare node. Then the node is validated
(clean readings), released (our taint and cordon go) and the scheduler places new work on it again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane
from kubernetes import client
from realkube import Cluster
from stack_world import STACK_WAIT_S, StackWorld, drain_results, uids
from waiting import wait_until

from agent.state.machine import DebounceConfig

NODES = 5
REPLICAS = 4
LABELS = {"app": "llm-serve"}


@pytest.fixture
def world(kube_stack: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StackWorld]:
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True)
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made
    made.close()
    cluster.close()


def start_inference(cluster: Cluster) -> None:
    """The Deployment and its budget (maxUnavailable 1); waits for 4 Running replicas and the computed
    budget."""
    container = {"name": "serve", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    deployment = {
        "metadata": {"name": "llm-serve"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
            },
        },
    }
    policy = client.PolicyV1Api(cluster.admin)
    policy.create_namespaced_pod_disruption_budget(
        cluster.namespace,
        {
            "metadata": {"name": "llm-serve"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": LABELS}},
        },
    )
    client.AppsV1Api(cluster.admin).create_namespaced_deployment(cluster.namespace, deployment)
    assert wait_until(lambda: len(cluster.running(**LABELS)) == REPLICAS, timeout=STACK_WAIT_S)

    def computed() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("llm-serve", cluster.namespace).status
        return status is not None and status.current_healthy == REPLICAS and status.disruptions_allowed == 1

    assert wait_until(computed, timeout=STACK_WAIT_S), "the disruption controller never computed the budget"


def test_an_inference_deployment_is_drained_within_its_budget_and_comes_back_on_a_healthy_node(
    world: StackWorld, record_property: Any
) -> None:
    """XID 79 under one replica: the eviction goes through the budget (one disruption allowed), the replica
    is made again by the ReplicaSet controller and placed by the scheduler on the spare node, never on the
    tainted one; at no moment are fewer than three replicas Running-and-ready (the budget held); four
    replicas serve again."""
    cluster = world.cluster
    start_inference(cluster)
    before = cluster.running(**LABELS)
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)
    lowest = [REPLICAS]

    fault = time.monotonic()
    world.break_node(bad)
    assert world.central_executor(bad).wait_for_drain(STACK_WAIT_S), "the central drain did not end"
    news = drain_results(world.tick(bad))
    assert [(kind, ok) for kind, ok, _ in news][:1] == [("Drain", True)], news

    def serving_again() -> bool:
        pods = cluster.running(**LABELS)
        lowest[0] = min(lowest[0], len(pods))
        return len(pods) == REPLICAS and all(p["spec"]["nodeName"] != bad for p in pods)

    assert wait_until(serving_again, timeout=STACK_WAIT_S), "four replicas never served again off the node"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (Deployment behind a PDB)")
    assert lowest[0] >= REPLICAS - 1, "the budget allowed one disruption, more replicas were down"
    assert len(uids(before) & uids(cluster.running(**LABELS))) == REPLICAS - 1
    assert world.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"


def test_a_released_node_takes_new_work_from_the_scheduler_again(world: StackWorld) -> None:
    """Recovery: after the drain the readings are clean (the reboot fixed the GPU), the agent closes the
    incident and takes its taint and cordon off; the node is schedulable, and a new 8-GPU pod, which fits
    nowhere else (four replicas fill the four other nodes), is placed on it by the scheduler."""
    cluster = world.cluster
    world.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    start_inference(cluster)
    bad = cluster.running(**LABELS)[0]["spec"]["nodeName"]
    world.agent(bad)
    world.break_node(bad)
    world.finish_drain(bad)
    assert wait_until(
        lambda: len([p for p in cluster.running(**LABELS) if p["spec"]["nodeName"] != bad]) == REPLICAS,
        timeout=STACK_WAIT_S,
    ), "the replica never moved to the spare node"

    world.heal(bad)
    closed = world.tick(bad)

    assert closed.health.incident is None
    node = cluster.node(bad)
    assert not node["spec"].get("unschedulable") and not world.tainted(bad)
    container = {"name": "batch", "image": "batch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    cluster.core.create_namespaced_pod(
        cluster.namespace,
        {
            "metadata": {"name": "after-release", "labels": {"app": "after"}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
        },
    )
    assert wait_until(lambda: len(cluster.running(app="after")) == 1, timeout=STACK_WAIT_S)
    assert cluster.running(app="after")[0]["spec"]["nodeName"] == bad
