"""Runbook on the real stack: XID 79 under a JobSet, kube-scheduler, KWOK nodes and the real JobSet manager.

Five KWOK GPU nodes (8 ``nvidia.com/gpu`` each), a 4-node JobSet (one pod per node), real agents that taint
and cordon their node and order the drain from the aggregator, whose central remediator evicts through the
Eviction API. What happens next is no code of ours: the real Job controller fails the child Job on the
pod's ``DisruptionTarget`` (its ``podFailurePolicy``), the real JobSet manager restarts the JobSet (its
``failurePolicy``), kube-scheduler places the new pods, KWOK runs them. Each test measures the time from the
fault to the job Running again (``record_property``: ``fault_to_running_s``).
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

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
NODES = 5  # a 4-pod gang and one spare


@pytest.fixture
def world(
    kube_stack: ControlPlane, jobset: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StackWorld]:
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True, namespace_labels=jobset.namespace_label)
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made
    made.close()
    cluster.close()


def jobset_body(name: str, *, failure_policy: bool) -> dict[str, Any]:
    """A JobSet of 4 one-pod Jobs, each pod taking a whole node. With ``failure_policy`` the Job fails on
    ``DisruptionTarget`` (``podFailurePolicy: FailJob``) and the JobSet restarts on that reason without
    counting it (``RestartJobSetAndIgnoreMaxRestarts``), the recipe of docs/requeue.md."""
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    job_spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        # Without a policy the eviction counts against the Job's backoff: with 0 the Job, and with it the
        # JobSet, would fail at once (the real JobSet fails on a failed Job when it has no failurePolicy).
        "backoffLimit": 0 if failure_policy else 3,
        "template": {
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        },
    }
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "workers", "replicas": 4, "template": {"spec": job_spec}}]
    }
    if failure_policy:
        job_spec["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
        spec["failurePolicy"] = {
            "maxRestarts": 0,
            "rules": [
                {
                    "name": "evicted",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": spec,
    }


def start_jobset(world: StackWorld, name: str, *, failure_policy: bool = True) -> dict[str, str]:
    """The JobSet, created through the API server (the JobSet webhooks default and validate it); waits for
    its 4 pods to run on 4 nodes. Returns its pod labels."""
    cluster = world.cluster
    client.CustomObjectsApi(cluster.admin).create_namespaced_custom_object(
        *JOBSET[:2], cluster.namespace, JOBSET[2], jobset_body(name, failure_policy=failure_policy)
    )
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    assert wait_until(lambda: len(cluster.running(**labels)) == 4, timeout=STACK_WAIT_S), "4 pods never ran"
    assert len({p["spec"]["nodeName"] for p in cluster.running(**labels)}) == 4
    return labels


def read_jobset(cluster: Cluster, name: str) -> dict[str, Any]:
    found = client.CustomObjectsApi(cluster.admin).get_namespaced_custom_object(
        *JOBSET[:2], cluster.namespace, JOBSET[2], name
    )
    return cast("dict[str, Any]", found)


def test_xid_79_under_a_jobset_the_real_jobset_manager_restarts_it_on_healthy_nodes(
    world: StackWorld, record_property: Any
) -> None:
    """XID 79 on one node of a 4-node JobSet with a failure policy: the agent taints and cordons the node
    and orders the drain; the remediator evicts the pod and leaves the restart to the JobSet (its own policy
    restarts on DisruptionTarget); the real JobSet manager restarts it once (``status.restarts`` 1, none of
    them counted towards maxRestarts), the real scheduler places all four new pods on the healthy nodes and
    none on the tainted one, and the job runs again. The time from the fault to Running is recorded."""
    cluster = world.cluster
    labels = start_jobset(world, "llm")
    before = cluster.running(**labels)
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)

    fault = time.monotonic()
    handled = world.break_node(bad)
    assert world.tainted(bad) and cluster.node(bad)["spec"].get("unschedulable") is True
    [(kind, ok, detail)] = drain_results(handled)
    assert (kind, ok) == ("Drain", True) and detail.startswith("drain ordered from the central remediator")

    news = drain_results(world.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    # The real JobSet manager often restarts (deleting the child Jobs) before the requeue reads the evicted
    # pod's owners; then there is no owner left to decide about. Either way nothing is written to it.
    assert "left-to-workload" in news[1][2] or news[1][2] == "requeue: no job to requeue", news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), "the JobSet never ran again on 4 new pods"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (JobSet, failure policy)")
    time.sleep(2)  # long enough for a second restart to show, if the manager were to make one

    assert all(p["spec"]["nodeName"] != bad for p in cluster.running(**labels))
    assert world.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    jobset = read_jobset(cluster, "llm")
    status = jobset.get("status") or {}
    assert status.get("restarts") == 1 and not status.get("restartsCountTowardsMax"), status
    assert REQUEUED_ANNOTATION not in (jobset["metadata"].get("annotations") or {})
    assert world.tainted(bad)


def test_xid_79_under_a_jobset_without_a_failure_policy_is_restarted_by_the_suspend_toggle(
    world: StackWorld, record_property: Any
) -> None:
    """The same fault under a JobSet with no failure policy (its Jobs just replace an evicted pod, so the
    gang would hang half-restarted): the remediator restarts it with the suspend toggle, which the real
    JobSet manager honours (it suspends the child Jobs, whose pods the Job controller deletes, and resumes
    them); the JobSet is marked with the incident, four new pods run on the healthy nodes."""
    cluster = world.cluster
    labels = start_jobset(world, "plain", failure_policy=False)
    before = cluster.running(**labels)
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)

    fault = time.monotonic()
    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    news = drain_results(world.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    assert "requeued (suspend-toggle)" in news[1][2], news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), "the JobSet never ran again on 4 new pods"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (JobSet, suspend toggle)")

    assert world.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    jobset = read_jobset(cluster, "plain")
    assert jobset["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    assert not jobset["spec"].get("suspend")
