"""Runbook on the real stack: Kueue-admitted Jobs and JobSets, with the real Kueue and JobSet managers.

Five KWOK GPU nodes, a ClusterQueue with 40 ``nvidia.com/gpu`` of one flavor and a LocalQueue in the test's
namespace; the workloads carry ``kueue.x-k8s.io/queue-name``, so Kueue's webhooks suspend them on creation and
Kueue admits them (a Workload per job). XID 79 on one node: the agent taints and cordons, the central
remediator evicts and requeues the way docs/requeue.md says for Kueue (left to the job's own policy when it
has one, else the Workload's ``spec.active`` toggle); Kueue and the job's controller do the rest, the real
scheduler places the new pods. Each test asserts that no replacement pod lands on the tainted node, that
the requeue costs the job no backoff, and that there is one restart per incident.
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

KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
NODES = 5
QUEUE = "gpus"


class Queues:
    """The cluster-scoped flavor and ClusterQueue of one test (names from its namespace) and its
    LocalQueue."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.custom = client.CustomObjectsApi(cluster.admin)
        self.flavor = f"{cluster.namespace}-flavor"
        self.cluster_queue = f"{cluster.namespace}-cq"
        self.custom.create_cluster_custom_object(
            *KUEUE,
            "resourceflavors",
            {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": self.flavor}},
        )
        quota = {"name": "nvidia.com/gpu", "nominalQuota": 8 * NODES}
        self.custom.create_cluster_custom_object(
            *KUEUE,
            "clusterqueues",
            {
                "apiVersion": "/".join(KUEUE),
                "kind": "ClusterQueue",
                "metadata": {"name": self.cluster_queue},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": self.flavor, "resources": [quota]}],
                        }
                    ],
                },
            },
        )
        self.custom.create_namespaced_custom_object(
            *KUEUE,
            cluster.namespace,
            "localqueues",
            {
                "apiVersion": "/".join(KUEUE),
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE},
                "spec": {"clusterQueue": self.cluster_queue},
            },
        )

    def workloads(self) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(*KUEUE, self.cluster.namespace, "workloads")
        return cast("list[dict[str, Any]]", listed["items"])

    def workload(self) -> dict[str, Any]:
        [found] = self.workloads()
        return found

    def close(self) -> None:
        for plural, name in (("clusterqueues", self.cluster_queue), ("resourceflavors", self.flavor)):
            try:
                self.custom.delete_cluster_custom_object(*KUEUE, plural, name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def admitted(workload: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True"
        for c in workload.get("status", {}).get("conditions", [])
    )


@pytest.fixture
def world(
    kube_stack: ControlPlane,
    jobset: Controller,
    kueue: Controller,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[StackWorld, Queues]]:
    labels = {**jobset.namespace_label, **kueue.namespace_label}
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True, namespace_labels=labels)
    queues = Queues(cluster)
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made, queues
    made.close()
    cluster.close()
    queues.close()


def gang_job(name: str, *, ignore_disruption: bool) -> dict[str, Any]:
    """A 4-pod Job (a pod per node) in the LocalQueue; ``ignore_disruption``: ``podFailurePolicy`` ignores
    ``DisruptionTarget`` (the evicted pod is replaced, not counted)."""
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    spec: dict[str, Any] = {
        "parallelism": 4,
        "completions": 4,
        "backoffLimit": 2,
        "template": {
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        },
    }
    if ignore_disruption:
        spec["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": spec,
    }


def start(world: StackWorld, queues: Queues, labels: dict[str, str]) -> list[dict[str, Any]]:
    cluster = world.cluster
    assert wait_until(lambda: len(cluster.running(**labels)) == 4, timeout=STACK_WAIT_S), "4 pods never ran"
    assert admitted(queues.workload())
    return cluster.running(**labels)


def test_a_kueue_job_whose_policy_ignores_the_eviction_gets_its_pod_replaced_off_the_tainted_node(
    world: tuple[StackWorld, Queues], record_property: Any
) -> None:
    """A Kueue-admitted 4-pod Job whose podFailurePolicy ignores DisruptionTarget: the remediator leaves it
    to the Job; the real Job controller replaces the evicted pod (not counted: ``status.failed`` stays 0,
    the backoff untouched), the Workload stays admitted (Kueue never evicts it), the scheduler places the
    replacement on the spare node, never on the tainted one."""
    stack, queues = world
    cluster = stack.cluster
    client.BatchV1Api(cluster.admin).create_namespaced_job(
        cluster.namespace, gang_job("kq", ignore_disruption=True)
    )
    labels = {"batch.kubernetes.io/job-name": "kq"}
    before = start(stack, queues, labels)
    workload_uid = queues.workload()["metadata"]["uid"]
    bad = before[0]["spec"]["nodeName"]
    stack.agent(bad)

    fault = time.monotonic()
    stack.break_node(bad)
    news = drain_results(stack.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    assert "left-to-workload" in news[1][2], news

    def replaced() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and all(p["spec"]["nodeName"] != bad for p in pods)

    assert wait_until(replaced, timeout=STACK_WAIT_S), "the replacement never ran off the tainted node"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (Kueue Job, podFailurePolicy Ignore)")
    assert len(uids(before) & uids(cluster.running(**labels))) == 3
    assert stack.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    job = client.BatchV1Api(cluster.admin).read_namespaced_job("kq", cluster.namespace)
    assert not job.status.failed, "the eviction was counted against the Job's backoff"
    workload = queues.workload()
    assert workload["metadata"]["uid"] == workload_uid and admitted(workload)
    assert not (workload.get("status") or {}).get("schedulingStats", {}).get("evictions")


def test_a_kueue_job_without_a_policy_is_requeued_once_by_the_workload_active_toggle(
    world: tuple[StackWorld, Queues], record_property: Any
) -> None:
    """A Kueue-admitted 4-pod Job with no podFailurePolicy: the gang would hang with one pod replaced, so the
    remediator deactivates and reactivates its Workload (``spec.active``); the real Kueue evicts the
    workload once (the Job suspended, its pods deleted), admits it again, and four new pods run on the
    healthy nodes. The Job's backoff is not consumed by the requeue (the pods deleted by the suspension are
    not failures; only the evicted pod itself counts, as the Job has no policy that says otherwise), and
    the Job carries the incident: one restart for it."""
    stack, queues = world
    cluster = stack.cluster
    client.BatchV1Api(cluster.admin).create_namespaced_job(
        cluster.namespace, gang_job("kp", ignore_disruption=False)
    )
    labels = {"batch.kubernetes.io/job-name": "kp"}
    before = start(stack, queues, labels)
    bad = before[0]["spec"]["nodeName"]
    stack.agent(bad)

    fault = time.monotonic()
    handled = stack.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    news = drain_results(stack.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    assert "requeued (workload-active-toggle)" in news[1][2], news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), "the Job never ran again on 4 new pods"
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (Kueue Job, active toggle)")
    assert stack.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    job = cluster.to_dict(client.BatchV1Api(cluster.admin).read_namespaced_job("kp", cluster.namespace))
    assert (job["status"].get("failed") or 0) <= 1, job["status"]
    assert job["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    workload = queues.workload()
    assert workload["spec"].get("active", True) is True and admitted(workload)
    evictions = (workload.get("status") or {}).get("schedulingStats", {}).get("evictions") or []
    assert sum(e.get("count", 0) for e in evictions) == 1, evictions


def test_a_kueue_jobset_with_a_failure_policy_restarts_itself_once_off_the_tainted_node(
    world: tuple[StackWorld, Queues], record_property: Any
) -> None:
    """A Kueue-admitted JobSet whose failure policy restarts it on the eviction: left to the JobSet; the
    real JobSet manager restarts it once (not counted towards maxRestarts), its Workload stays admitted
    (no Kueue eviction, no requeue), four new pods on the healthy nodes and none on the tainted one."""
    stack, queues = world
    cluster = stack.cluster
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    job_spec = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
        "template": {
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        },
    }
    body = {
        "apiVersion": "/".join(JOBSET[:2]),
        "kind": "JobSet",
        "metadata": {"name": "kjs", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "replicatedJobs": [{"name": "workers", "replicas": 4, "template": {"spec": job_spec}}],
            "failurePolicy": {
                "maxRestarts": 0,
                "rules": [
                    {
                        "name": "evicted",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
        },
    }
    custom = client.CustomObjectsApi(cluster.admin)
    custom.create_namespaced_custom_object(*JOBSET[:2], cluster.namespace, JOBSET[2], body)
    labels = {"jobset.sigs.k8s.io/jobset-name": "kjs"}
    before = start(stack, queues, labels)
    bad = before[0]["spec"]["nodeName"]
    stack.agent(bad)

    fault = time.monotonic()
    stack.break_node(bad)
    news = drain_results(stack.finish_drain(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)], news
    # As without Kueue: the JobSet may have restarted (its Jobs gone) before the requeue reads the owners.
    assert "left-to-workload" in news[1][2] or news[1][2] == "requeue: no job to requeue", news

    def running_again() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(running_again, timeout=STACK_WAIT_S), "the JobSet never ran again on 4 new pods"
    time.sleep(2)  # long enough for a second restart to show
    elapsed = time.monotonic() - fault
    record_property("fault_to_running_s", round(elapsed, 2))
    print(f"fault_to_running_s={elapsed:.2f} (Kueue JobSet, failure policy)")
    assert stack.placements.on(bad, since=fault) == [], "a pod was placed on the tainted node"
    jobset = cast(
        "dict[str, Any]",
        custom.get_namespaced_custom_object(*JOBSET[:2], cluster.namespace, JOBSET[2], "kjs"),
    )
    status = jobset.get("status") or {}
    assert status.get("restarts") == 1 and not status.get("restartsCountTowardsMax"), status
    workload = queues.workload()
    assert admitted(workload)
    assert not (workload.get("status") or {}).get("schedulingStats", {}).get("evictions")
