"""End to end on the emulator with its workload controllers running: the requeued job really restarts.

A 4-node JobSet without a restart rule loses one pod to an eviction (its node cordoned, as the drain does);
the child Job alone would only replace that pod while the other three stay in their hung collective. The
Requeuer's suspend toggle restarts the whole gang: every pod is new, Running, and off the bad node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from waiting import HANG_GUARD_S, wait_until

from core.clock import RealClock
from remediation.kubernetes.requeue.api import Requeuer
from remediation.kubernetes.requeue.decisions import (
    EVENT_REASON,
    REQUEUED_ANNOTATION,
    RequeueAction,
    RequeuePolicy,
    Result,
)
from sim.kube.harness import KubeSim, running_kube_sim

NS = "train"
INCIDENT = "inc-gpu-node-3-20261202T141500Z-e2e1"
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
POLL_S = 0.05  # each poll lists pods through the store: no need to ask more often


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    """Five GPU nodes, every controller including the training-job operators, on real time."""
    with running_kube_sim(clock=RealClock(), nodes=5, workloads=True, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


def one_pod_per_node() -> dict[str, Any]:
    """A pod spec taking all 8 GPUs of a node, so each node runs one pod of the gang."""
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}


def running_pods(kube: KubeSim) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.store.list("pods", NS)
        if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
    ]


def start_jobset(kube: KubeSim) -> None:
    pod_spec = one_pod_per_node()
    job = {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {"spec": pod_spec}}}
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": job}]},
    }
    kube.store.create(JOBSET_KEY, body)
    wait_until(lambda: len(running_pods(kube)) == 4, interval=POLL_S, message="the JobSet's 4 pods to run")


def test_jobset_without_restart_rule_restarts_all_its_pods_off_the_bad_node(kube: KubeSim) -> None:
    """Evict one pod, requeue: all four pods are replaced, Running on healthy nodes, incident on the JobSet."""
    start_jobset(kube)
    before = {p["metadata"]["uid"] for p in running_pods(kube)}
    bad_node = running_pods(kube)[0]["spec"]["nodeName"]
    (victim,) = [p for p in running_pods(kube) if p["spec"]["nodeName"] == bad_node]
    api_client = kube.api_client()
    try:
        core = client.CoreV1Api(api_client)
        core.patch_node(bad_node, {"spec": {"unschedulable": True}})
        name = victim["metadata"]["name"]
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
        core.create_namespaced_pod_eviction(name, NS, eviction)
        wait_until(
            lambda: kube.store.get("pods", NS, victim["metadata"]["name"]) is None,
            interval=POLL_S,
            message="the eviction",
        )
        requeuer = Requeuer(
            api_client, policy=RequeuePolicy(), clock=RealClock(), observe_timeout_s=HANG_GUARD_S
        )
        report = requeuer.requeue([victim], incident_id=INCIDENT, node=bad_node)
    finally:
        api_client.close()
    (outcome,) = report.outcomes
    assert (outcome.action, outcome.result, outcome.observed) == (
        RequeueAction.SUSPEND_TOGGLE,
        Result.REQUEUED,
        True,
    )

    def all_replaced_and_running() -> bool:
        pods = running_pods(kube)
        return len(pods) == 4 and not before & {p["metadata"]["uid"] for p in pods}

    wait_until(all_replaced_and_running, interval=POLL_S, message="four new Running pods")
    assert all(p["spec"]["nodeName"] != bad_node for p in running_pods(kube))
    jobset = kube.store.get(JOBSET_KEY, NS, "llm")
    assert jobset is not None
    assert jobset["metadata"]["annotations"][REQUEUED_ANNOTATION] == INCIDENT
    assert jobset["spec"]["suspend"] is False
    assert [e["reason"] for e in kube.store.list("events", NS) if e.get("reason") == EVENT_REASON] == [
        EVENT_REASON
    ]


def test_volcano_job_without_eviction_policy_restarts_once_through_a_command(kube: KubeSim) -> None:
    """Evict one pod of a Volcano job without policies, requeue twice (a second node of the incident):
    Volcano runs exactly one RestartJob (retryCount 1), every pod is new and off the bad node."""
    pod_spec = one_pod_per_node()
    body = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc", "namespace": NS},
        "spec": {"tasks": [{"name": "worker", "replicas": 4, "template": {"spec": pod_spec}}]},
    }
    kube.store.create("jobs.batch.volcano.sh", body)
    wait_until(
        lambda: len(running_pods(kube)) == 4, interval=POLL_S, message="the Volcano job's 4 pods to run"
    )
    before = {p["metadata"]["uid"] for p in running_pods(kube)}
    bad_node = running_pods(kube)[0]["spec"]["nodeName"]
    (victim,) = [p for p in running_pods(kube) if p["spec"]["nodeName"] == bad_node]
    api_client = kube.api_client()
    try:
        client.CoreV1Api(api_client).patch_node(bad_node, {"spec": {"unschedulable": True}})
        kube.store.delete("pods", NS, victim["metadata"]["name"])  # the eviction, as far as Volcano sees it
        requeuer = Requeuer(
            api_client, policy=RequeuePolicy(), clock=RealClock(), observe_timeout_s=HANG_GUARD_S
        )
        first = requeuer.requeue([victim], incident_id=INCIDENT, node=bad_node)
        second = requeuer.requeue([victim], incident_id=INCIDENT, node="gpu-node-2")
    finally:
        api_client.close()
    assert [o.result for o in (*first.outcomes, *second.outcomes)] == [
        Result.REQUEUED,
        Result.ALREADY_REQUEUED,
    ]

    def restarted_and_running() -> bool:
        pods = running_pods(kube)
        return len(pods) == 4 and not before & {p["metadata"]["uid"] for p in pods}

    wait_until(restarted_and_running, interval=POLL_S, message="four new Running pods")
    assert all(p["spec"]["nodeName"] != bad_node for p in running_pods(kube))
    vcjob = kube.store.get("jobs.batch.volcano.sh", NS, "vc")
    assert vcjob is not None and vcjob["status"]["retryCount"] == 1
    assert vcjob["metadata"]["annotations"][REQUEUED_ANNOTATION] == INCIDENT


def create_kueue_queues(kube: KubeSim, gpus: int) -> None:
    """One ResourceFlavor, a ClusterQueue with ``gpus`` of nominal quota, and LocalQueue ``team-a`` in NS."""
    kueue = "kueue.x-k8s.io/v1beta1"
    flavor = {"apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": "h200"}}
    kube.store.create("resourceflavors.kueue.x-k8s.io", flavor)
    quota = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    group = {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h200", "resources": [quota]}]}
    cluster_queue = {
        "apiVersion": kueue,
        "kind": "ClusterQueue",
        "metadata": {"name": "gpus"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
    }
    kube.store.create("clusterqueues.kueue.x-k8s.io", cluster_queue)
    local = {"apiVersion": kueue, "kind": "LocalQueue", "metadata": {"name": "team-a", "namespace": NS}}
    kube.store.create("localqueues.kueue.x-k8s.io", {**local, "spec": {"clusterQueue": "gpus"}})


def test_kueue_job_is_deactivated_and_readmitted_off_the_bad_node(kube: KubeSim) -> None:
    """A Kueue-managed 4-pod Job without a DisruptionTarget rule: Workload active false then true; Kueue
    evicts and re-admits it, every pod is new and Running on healthy nodes."""
    create_kueue_queues(kube, gpus=64)
    pod_spec = one_pod_per_node()
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ft", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"suspend": True, "parallelism": 4, "completions": 4, "template": {"spec": pod_spec}},
    }
    kube.store.create("jobs.batch", job)
    wait_until(
        lambda: len(running_pods(kube)) == 4, interval=POLL_S, message="the admitted Job's 4 pods to run"
    )
    before = {p["metadata"]["uid"] for p in running_pods(kube)}
    bad_node = running_pods(kube)[0]["spec"]["nodeName"]
    victims = [p for p in running_pods(kube) if p["spec"]["nodeName"] == bad_node]
    api_client = kube.api_client()
    try:
        client.CoreV1Api(api_client).patch_node(bad_node, {"spec": {"unschedulable": True}})
        for victim in victims:
            kube.store.delete("pods", NS, victim["metadata"]["name"])
        requeuer = Requeuer(
            api_client, policy=RequeuePolicy(), clock=RealClock(), observe_timeout_s=HANG_GUARD_S
        )
        report = requeuer.requeue(victims, incident_id=INCIDENT, node=bad_node)
    finally:
        api_client.close()
    (outcome,) = report.outcomes
    assert (outcome.action, outcome.result, outcome.observed) == (
        RequeueAction.WORKLOAD_ACTIVE_TOGGLE,
        Result.REQUEUED,
        True,
    )

    def readmitted_and_running() -> bool:
        pods = running_pods(kube)
        return len(pods) == 4 and not before & {p["metadata"]["uid"] for p in pods}

    wait_until(readmitted_and_running, interval=POLL_S, message="four new Running pods after re-admission")
    assert all(p["spec"]["nodeName"] != bad_node for p in running_pods(kube))
    stored_job = kube.store.get("jobs.batch", NS, "ft")
    assert stored_job is not None and stored_job["metadata"]["annotations"][REQUEUED_ANNOTATION] == INCIDENT
