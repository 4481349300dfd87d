"""Runbook on the real stack: a Kueue workload placed by topology-aware scheduling (TAS), with and without
Kueue's node-taint replacement (``TASReplaceNodeOnNodeTaints``, beta and on by default in Kueue 0.17).

Under TAS, Kueue pins each pod to a node (a nodeSelector on the hostname, from the Workload's
``topologyAssignment``). A pod replaced by the Job's own controller goes back to the node it left, so on a
tainted node it stays Pending for good unless Kueue moves the assignment (the gate on), and users have seen
the moved pods loop back onto the tainted node (kubernetes-sigs/kueue#14917). The remediator therefore
requeues such a workload with the ``spec.active`` toggle whatever the job's own policy: Kueue evicts it once
and admits it again on healthy nodes. Asserted with the gate off and on: no pod on the tainted node, the
Job's backoff untouched, one eviction for the incident.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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

KUEUE = ("kueue.x-k8s.io", "v1beta2")
NODES = 5
QUEUE = "gpus"
GATE = "TASReplaceNodeOnNodeTaints"


def kueue_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(params=[False, True], ids=["replacement-off", "replacement-on"])
def world(
    request: pytest.FixtureRequest,
    kube_stack: ControlPlane,
    kueue_with: Callable[[dict[str, bool]], Controller],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[StackWorld]:
    """Kueue with the gate as the parameter says; a Topology by hostname, a TAS flavor over the GPU
    operator's ``nvidia.com/gpu.present`` nodes, a ClusterQueue and LocalQueue for the test's namespace."""
    kueue = kueue_with({GATE: request.param})
    labels = {**kube_stack.managers["jobset"].namespace_label, **kueue.namespace_label}
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True, namespace_labels=labels)
    custom = client.CustomObjectsApi(cluster.admin)
    ns = cluster.namespace
    topology, flavor, cluster_queue = f"{ns}-topology", f"{ns}-tas", f"{ns}-cq"
    custom.create_cluster_custom_object(
        *KUEUE,
        "topologies",
        kueue_object("Topology", topology, {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}),
    )
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        kueue_object(
            "ResourceFlavor",
            flavor,
            {"nodeLabels": {"nvidia.com/gpu.present": "true"}, "topologyName": topology},
        ),
    )
    quota = {"name": "nvidia.com/gpu", "nominalQuota": 8 * NODES}
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        kueue_object(
            "ClusterQueue",
            cluster_queue,
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": flavor, "resources": [quota]}],
                    }
                ],
            },
        ),
    )
    custom.create_namespaced_custom_object(
        *KUEUE, ns, "localqueues", kueue_object("LocalQueue", QUEUE, {"clusterQueue": cluster_queue})
    )
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made
    made.close()
    cluster.close()
    for plural, name in (
        ("clusterqueues", cluster_queue),
        ("resourceflavors", flavor),
        ("topologies", topology),
    ):
        try:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def workload(world: StackWorld) -> dict[str, Any]:
    listed = client.CustomObjectsApi(world.cluster.admin).list_namespaced_custom_object(
        *KUEUE, world.cluster.namespace, "workloads"
    )
    [found] = cast("list[dict[str, Any]]", listed["items"])
    return found


def test_a_tas_placed_kueue_job_is_requeued_off_the_tainted_node_with_or_without_node_replacement(
    world: StackWorld, record_property: Any
) -> None:
    """A 4-pod Kueue Job placed by TAS (``podset-unconstrained-topology``), whose podFailurePolicy ignores
    the eviction: the remediator toggles its Workload's ``spec.active`` (a replaced pod would be pinned to
    the tainted node); Kueue evicts it once and admits it again with a topology assignment that leaves the
    tainted node out; four new pods run on the healthy nodes, none was ever placed on the tainted one, the
    Job counts no failure."""
    cluster = world.cluster
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "tas", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "backoffLimit": 3,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container],
                },
            },
        },
    }
    client.BatchV1Api(cluster.admin).create_namespaced_job(cluster.namespace, job)
    labels = {"batch.kubernetes.io/job-name": "tas"}
    assert wait_until(lambda: len(cluster.running(**labels)) == 4, timeout=STACK_WAIT_S), "4 pods never ran"
    before = cluster.running(**labels)
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] == p["spec"]["nodeName"] for p in before)
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)

    fault = time.monotonic()
    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    news = drain_results(world.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    assert "requeued (workload-active-toggle)" in news[1][2], news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), "the Job never ran again on 4 new pods"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (Kueue TAS Job)")
    assert world.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    assert not [
        p
        for p in cluster.pods(**labels)
        if p["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname") == bad
    ]
    found = cluster.to_dict(client.BatchV1Api(cluster.admin).read_namespaced_job("tas", cluster.namespace))
    assert not found["status"].get("failed"), found["status"]
    assert found["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    evictions = (workload(world).get("status") or {}).get("schedulingStats", {}).get("evictions") or []
    assert sum(e.get("count", 0) for e in evictions) == 1, evictions
