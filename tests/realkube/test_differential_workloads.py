"""The emulated JobSet, Kueue and Trainer controllers (``sim/kube/controllers``) against the real managers.

The same story on both, observed the same way: the JobSet suspend toggle (the ``Suspended`` condition and
``replicatedJobsStatus`` the requeue waits for, the pods gone and back); a JobSet restart on an evicted pod
by its failure policy (``restarts`` counted, not towards the maximum); the JobSet failure policies the
requeue decides by (no policy, ``RestartJobSet`` up to ``maxRestarts``, a ``FailJobSet`` rule), with the
``RestartingJobSet`` condition and the Warning Events a person reads; Kueue's ``spec.active`` toggle on an
admitted Job's and a queued JobSet's Workload (the conditions, reasons and eviction count the requeue and a
person read, the job suspended and resumed); and a TrainJob on the Trainer module's ``torch-distributed``
runtime (the JobSet made for it, ``numNodes``, ``image`` and ``resourcesPerNode`` on its pods, the suspend
toggle carried down to the JobSet with the TrainJob's ``Suspended`` condition). What differs is fixed in the
emulator; what remains is in sim/README.md. Each story's real observation is printed (``-s``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from control_plane import ControlPlane
from kube_stack import Controller, load_yaml
from kubernetes import client
from realkube import Cluster
from stack_world import STACK_WAIT_S
from waiting import wait_until

from core.clock import RealClock
from sim.kube.harness import running_kube_sim

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
TRAINJOB = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
TRAINER_RUNTIME = "manifests/runtimes/torch_distributed.yaml"  # in the Trainer module, beside its binary
KUEUE_VERSIONS = {"real": "v1beta2", "sim": "v1beta1"}  # what each serves (sim/README.md)
NODES = 5


@dataclass
class Side:
    name: str
    api_client: client.ApiClient
    namespace: str
    settle: Callable[[], None]
    runtime: dict[str, Any]  # the Trainer module's torch-distributed ClusterTrainingRuntime

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def running(self, **labels: str) -> int:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return len([p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None])

    def clean(self, delete: Callable[[], object]) -> None:
        """Delete a story's workload, its Jobs and pods (the emulator collects no garbage in general), and
        wait until the pods are gone: the next story needs the nodes."""
        delete()
        batch = client.BatchV1Api(self.api_client)
        for job in batch.list_namespaced_job(self.namespace).items:
            with contextlib.suppress(client.ApiException):
                batch.delete_namespaced_job(
                    job.metadata.name, self.namespace, propagation_policy="Background"
                )
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            with contextlib.suppress(client.ApiException):  # the Job's tracking finalizer would hold it
                self.core.patch_namespaced_pod(
                    pod.metadata.name, self.namespace, {"metadata": {"finalizers": None}}
                )
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        self.wait(lambda: not self.core.list_namespaced_pod(self.namespace).items, "the pods stayed")

    def delete_jobset(self, name: str) -> None:
        body = client.V1DeleteOptions(propagation_policy="Foreground")
        self.clean(
            lambda: self.custom.delete_namespaced_custom_object(
                *JOBSET[:2], self.namespace, JOBSET[2], name, body=body
            )
        )

    def wait(self, predicate: Callable[[], bool], message: str) -> None:
        assert wait_until(predicate, timeout=STACK_WAIT_S), f"{self.name}: {message}"


@pytest.fixture(scope="module")
def real(kube_stack: ControlPlane) -> Iterator[Side]:
    jobset: Controller = kube_stack.controller("jobset")
    kueue: Controller = kube_stack.controller("kueue", feature_gates={})
    trainer: Controller = kube_stack.controller("trainer")  # its runtimes applied from its module
    labels = {**jobset.namespace_label, **kueue.namespace_label, **trainer.namespace_label}
    cluster = Cluster(kube_stack, nodes=NODES, namespace_labels=labels)
    try:
        yield Side("real", cluster.admin, cluster.namespace, lambda: None, trainer_runtime(trainer))
    finally:
        with contextlib.suppress(Exception):
            cluster.close()


def trainer_runtime(trainer: Controller) -> dict[str, Any]:
    (runtime,) = load_yaml(trainer.home / TRAINER_RUNTIME)
    return runtime


@pytest.fixture(scope="module")
def sim(real: Side) -> Iterator[Side]:
    """The emulator, with the same ClusterTrainingRuntime the real Trainer was given."""
    with running_kube_sim(clock=RealClock(), nodes=NODES, workloads=True, bookmark_interval_s=0.2) as kube:
        kube.store.create("namespaces", {"metadata": {"name": "diff"}})
        kube.store.create("clustertrainingruntimes.trainer.kubeflow.org", real.runtime)
        api_client = kube.api_client()
        yield Side("sim", api_client, "diff", kube.settle, real.runtime)
        api_client.close()


def gang_jobset(name: str, *, failure_policy: bool) -> dict[str, Any]:
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    job: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0 if failure_policy else 3,
        "template": {
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        },
    }
    spec: dict[str, Any] = {"replicatedJobs": [{"name": "w", "replicas": 4, "template": {"spec": job}}]}
    if failure_policy:
        job["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
        spec["failurePolicy"] = {
            "maxRestarts": 0,
            "rules": [
                {"action": "RestartJobSetAndIgnoreMaxRestarts", "onJobFailureReasons": ["PodFailurePolicy"]}
            ],
        }
    return {"apiVersion": "/".join(JOBSET[:2]), "kind": "JobSet", "metadata": {"name": name}, "spec": spec}


def read_jobset(side: Side, name: str) -> dict[str, Any]:
    found = side.custom.get_namespaced_custom_object(*JOBSET[:2], side.namespace, JOBSET[2], name)
    return cast("dict[str, Any]", found)


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""))
        for c in (obj.get("status") or {}).get("conditions") or []
    }


def suspend_story(side: Side) -> dict[str, Any]:
    name = "susp"
    side.custom.create_namespaced_custom_object(
        *JOBSET[:2], side.namespace, JOBSET[2], gang_jobset(name, failure_policy=False)
    )
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran")
    side.custom.patch_namespaced_custom_object(
        *JOBSET[:2], side.namespace, JOBSET[2], name, {"spec": {"suspend": True}}
    )

    def suspended() -> bool:
        status = read_jobset(side, name).get("status") or {}
        jobs = status.get("replicatedJobsStatus") or []
        return conditions(read_jobset(side, name)).get("Suspended", ("", ""))[0] == "True" and all(
            not j.get("active") for j in jobs
        )

    side.wait(suspended, "never seen suspended")
    side.wait(lambda: side.running(**labels) == 0, "the pods stayed")
    at_rest = read_jobset(side, name)
    jobs = at_rest["status"]["replicatedJobsStatus"][0]
    side.custom.patch_namespaced_custom_object(
        *JOBSET[:2], side.namespace, JOBSET[2], name, {"spec": {"suspend": False}}
    )
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran again")
    side.wait(
        lambda: conditions(read_jobset(side, name)).get("Suspended", ("", ""))[0] == "False", "not resumed"
    )
    resumed = conditions(read_jobset(side, name))["Suspended"]
    side.delete_jobset(name)
    return {
        "suspended": conditions(at_rest)["Suspended"],
        "suspended_jobs": (jobs.get("active"), jobs.get("suspended")),
        "resumed": resumed,
    }


def restart_story(side: Side) -> dict[str, Any]:
    name = "rst"
    side.custom.create_namespaced_custom_object(
        *JOBSET[:2], side.namespace, JOBSET[2], gang_jobset(name, failure_policy=True)
    )
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran")
    pod = side.core.list_namespaced_pod(
        side.namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    ).items[0]
    side.core.create_namespaced_pod_eviction(
        pod.metadata.name,
        side.namespace,
        {"metadata": {"name": pod.metadata.name, "namespace": side.namespace}},
    )
    side.wait(
        lambda: int((read_jobset(side, name).get("status") or {}).get("restarts") or 0) >= 1, "no restart"
    )
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran again")
    side.wait(lambda: restarting(side, name) != "True", "still restarting once running again")
    status = read_jobset(side, name).get("status") or {}
    found = conditions(read_jobset(side, name))
    warnings = warning_reasons(side, name)
    side.delete_jobset(name)
    return {
        "restarts": status.get("restarts"),
        "towards_max": status.get("restartsCountTowardsMax") or 0,
        "restarting": found.get("RestartingJobSet"),
        "warnings": warnings,
    }


def evict_first_pod(side: Side, jobset: str) -> None:
    pod = side.core.list_namespaced_pod(
        side.namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}"
    ).items[0]
    side.core.create_namespaced_pod_eviction(
        pod.metadata.name,
        side.namespace,
        {"metadata": {"name": pod.metadata.name, "namespace": side.namespace}},
    )


def backoff_story(side: Side, name: str, failure_policy: dict[str, Any] | None) -> dict[str, Any]:
    """A gang whose Jobs have ``backoffLimit: 0`` and no ``podFailurePolicy``: the eviction fails the Job
    (``BackoffLimitExceeded``), and the JobSet's ``failurePolicy`` (or its absence) decides."""
    body = gang_jobset(name, failure_policy=False)
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    if failure_policy is not None:
        body["spec"]["failurePolicy"] = failure_policy
    side.custom.create_namespaced_custom_object(*JOBSET[:2], side.namespace, JOBSET[2], body)
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran")
    evict_first_pod(side, name)

    def decided() -> bool:
        status = read_jobset(side, name).get("status") or {}
        return (
            int(status.get("restarts") or 0) >= 1
            or conditions(read_jobset(side, name)).get("Failed", ("", ""))[0] == "True"
        )

    side.wait(decided, "neither restarted nor failed")
    status = read_jobset(side, name).get("status") or {}
    if int(status.get("restarts") or 0) >= 1:
        side.wait(lambda: side.running(**labels) == 4, "4 pods never ran again")
        status = read_jobset(side, name).get("status") or {}
        side.wait(lambda: restarting(side, name) != "True", "still restarting once running again")
    found = conditions(read_jobset(side, name))
    warnings = warning_reasons(side, name)
    side.delete_jobset(name)
    return {
        "restarts": status.get("restarts") or 0,
        "towards_max": status.get("restartsCountTowardsMax") or 0,
        "failed": found.get("Failed"),
        "restarting": found.get("RestartingJobSet"),
        "warnings": warnings,
    }


def restarting(side: Side, name: str) -> str:
    return conditions(read_jobset(side, name)).get("RestartingJobSet", ("", ""))[0]


def warning_reasons(side: Side, name: str) -> list[str]:
    """The reasons of the Warning Events about the JobSet ``name``. Left out: ``JobCreationFailed``, which
    the real manager records when it recreates a Job whose previous one is still being deleted (a race of
    its own that the emulator, recreating only once the old Job is gone, never loses)."""
    seen: list[list[str]] = []

    def settled() -> bool:  # a recorder sends its Events after the status: until two looks agree
        selector = f"involvedObject.name={name}"
        events = side.core.list_namespaced_event(side.namespace, field_selector=selector).items
        seen.append(sorted({e.reason for e in events if e.type == "Warning"} - {"JobCreationFailed"}))
        return len(seen) > 1 and bool(seen[-1]) and seen[-1] == seen[-2]

    assert wait_until(settled, timeout=STACK_WAIT_S, interval=0.5), f"{side.name}: no Warning Event"
    return seen[-1]


def no_policy_story(side: Side) -> dict[str, Any]:
    """No failure policy: the real JobSet fails with its failed Job (our requeue then writes nothing)."""
    return backoff_story(side, "nopol", None)


def counted_restart_story(side: Side) -> dict[str, Any]:
    """``maxRestarts: 1`` and no rule (``RestartJobSet`` by default): one restart, counted towards it."""
    return backoff_story(side, "counted", {"maxRestarts": 1})


def max_restarts_story(side: Side) -> dict[str, Any]:
    """``maxRestarts: 0`` and no rule: ``RestartJobSet`` has no restart left, the JobSet fails."""
    return backoff_story(side, "maxed", {"maxRestarts": 0})


def fail_rule_story(side: Side) -> dict[str, Any]:
    """A ``FailJobSet`` rule on ``BackoffLimitExceeded``: the JobSet fails, however many restarts it had."""
    rule = {"action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]}
    return backoff_story(side, "failrule", {"maxRestarts": 3, "rules": [rule]})


def kueue_queue(side: Side) -> tuple[str, str]:
    """The ResourceFlavor, ClusterQueue (a GPU quota for every node) and LocalQueue ``q`` of the Kueue
    stories, made once per side; the API group and version it serves Workloads at."""
    version = KUEUE_VERSIONS[side.name]
    group = ("kueue.x-k8s.io", version)
    flavor, cq = f"{side.namespace}-diff-flavor", f"{side.namespace}-diff-cq"
    found = side.custom.list_namespaced_custom_object(*group, side.namespace, "localqueues")["items"]
    if found:
        return group
    side.custom.create_cluster_custom_object(
        *group,
        "resourceflavors",
        {"apiVersion": "/".join(group), "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    quota = {"name": "nvidia.com/gpu", "nominalQuota": 8 * NODES}
    side.custom.create_cluster_custom_object(
        *group,
        "clusterqueues",
        {
            "apiVersion": "/".join(group),
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": flavor, "resources": [quota]}],
                    }
                ],
            },
        },
    )
    side.custom.create_namespaced_custom_object(
        *group,
        side.namespace,
        "localqueues",
        {
            "apiVersion": "/".join(group),
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": cq},
        },
    )
    return group


def kueue_story(side: Side) -> dict[str, Any]:
    group = kueue_queue(side)
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    job = {
        "metadata": {"name": "kj", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "suspend": True,  # what Kueue's webhook makes it (the emulator has no webhooks)
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container],
                }
            },
        },
    }
    batch = client.BatchV1Api(side.api_client)
    batch.create_namespaced_job(side.namespace, job)
    labels = {"batch.kubernetes.io/job-name": "kj"}
    side.wait(lambda: side.running(**labels) == 2, "the admitted Job never ran")

    def workload() -> dict[str, Any]:
        listed = side.custom.list_namespaced_custom_object(*group, side.namespace, "workloads")
        return cast("dict[str, Any]", listed["items"][0])

    admitted = conditions(workload())
    name = workload()["metadata"]["name"]
    side.custom.patch_namespaced_custom_object(
        *group, side.namespace, "workloads", name, {"spec": {"active": False}}
    )

    def evicted() -> bool:  # and settled: the real Kueue marks Evicted before it releases the quota
        now = conditions(workload())
        return now.get("Evicted", ("", ""))[0] == "True" and now.get("QuotaReserved", ("", ""))[0] == "False"

    side.wait(evicted, "never evicted")
    side.wait(lambda: side.running(**labels) == 0, "the pods stayed")
    inactive = workload()
    suspended = batch.read_namespaced_job("kj", side.namespace).spec.suspend
    side.custom.patch_namespaced_custom_object(
        *group, side.namespace, "workloads", name, {"spec": {"active": True}}
    )
    side.wait(lambda: side.running(**labels) == 2, "never ran again")
    side.wait(lambda: conditions(workload()).get("Admitted", ("", ""))[0] == "True", "never admitted again")
    again = workload()
    evictions = ((again.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    body = client.V1DeleteOptions(propagation_policy="Foreground")
    side.clean(lambda: batch.delete_namespaced_job("kj", side.namespace, body=body))
    return {
        "admitted": {k: admitted[k] for k in ("QuotaReserved", "Admitted")},
        "inactive": conditions(inactive),
        "job_suspended": suspended,
        "reactivated": conditions(again),
        "evictions": [(e.get("reason"), e.get("count")) for e in evictions],
    }


def kueue_jobset_story(side: Side) -> dict[str, Any]:
    """A JobSet queued in Kueue: its Workload (one pod set per replicated job), admission unsuspending the
    JobSet, then the ``spec.active`` toggle the requeue uses on a Kueue workload that will not restart by
    itself: the JobSet suspended and its pods gone, then admitted and running again."""
    group = kueue_queue(side)
    name = "kjs"
    body = gang_jobset(name, failure_policy=False)
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    body["spec"]["suspend"] = True  # what Kueue's webhook makes it (the emulator has no webhooks)
    side.custom.create_namespaced_custom_object(*JOBSET[:2], side.namespace, JOBSET[2], body)
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    side.wait(lambda: side.running(**labels) == 4, "the admitted JobSet never ran")

    def workloads() -> list[dict[str, Any]]:
        listed = side.custom.list_namespaced_custom_object(*group, side.namespace, "workloads")
        return [w for w in listed["items"] if w["metadata"]["name"].startswith(f"jobset-{name}-")]

    (workload,) = workloads()
    made = {
        "pod_sets": [(s["name"], s["count"]) for s in workload["spec"]["podSets"]],
        "owner": [(o["kind"], o["name"]) for o in workload["metadata"].get("ownerReferences") or []],
        "admitted": conditions(workload).get("Admitted"),
    }
    wl_name = workload["metadata"]["name"]
    side.custom.patch_namespaced_custom_object(
        *group, side.namespace, "workloads", wl_name, {"spec": {"active": False}}
    )
    side.wait(lambda: bool(read_jobset(side, name)["spec"].get("suspend")), "the JobSet never suspended")
    side.wait(lambda: side.running(**labels) == 0, "the pods stayed")
    evicted = conditions(workloads()[0]).get("Evicted")
    side.custom.patch_namespaced_custom_object(
        *group, side.namespace, "workloads", wl_name, {"spec": {"active": True}}
    )
    side.wait(lambda: side.running(**labels) == 4, "never ran again")
    side.wait(lambda: conditions(workloads()[0]).get("Admitted", ("", ""))[0] == "True", "never admitted")
    again = workloads()[0]
    evictions = ((again.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    side.delete_jobset(name)
    side.wait(lambda: not workloads(), "the Workload stayed")
    return {
        **made,
        "evicted": evicted,
        "evictions": [(e.get("reason"), e.get("count")) for e in evictions],
    }


def jobsets(side: Side) -> list[dict[str, Any]]:
    listed = side.custom.list_namespaced_custom_object(*JOBSET[:2], side.namespace, JOBSET[2])
    return cast("list[dict[str, Any]]", listed["items"])


def trainjob_story(side: Side) -> dict[str, Any]:
    """A 4-node TrainJob on ``torch-distributed``: what Trainer makes of it, then the suspend toggle the
    requeue uses on a TrainJob (docs/requeue.md), carried down to its JobSet."""
    name = "tj"
    body = {
        "apiVersion": "/".join(TRAINJOB[:2]),
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": side.runtime["metadata"]["name"]},
            "trainer": {
                "numNodes": 4,
                "image": "registry.invalid/llm:1",
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}},
            },
        },
    }
    side.custom.create_namespaced_custom_object(*TRAINJOB[:2], side.namespace, TRAINJOB[2], body)
    labels = {"jobset.sigs.k8s.io/jobset-name": name}
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran")

    def trainjob() -> dict[str, Any]:
        found = side.custom.get_namespaced_custom_object(*TRAINJOB[:2], side.namespace, TRAINJOB[2], name)
        return cast("dict[str, Any]", found)

    jobset = read_jobset(side, name)
    owner: dict[str, Any] = next(iter(jobset["metadata"].get("ownerReferences") or []), {})
    node_job = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    pods = [p for p in side.core.list_namespaced_pod(side.namespace).items if p.status.phase == "Running"]
    made = {
        "owner": (owner.get("kind"), owner.get("name"), owner.get("controller")),
        "replicated_jobs": [r["name"] for r in jobset["spec"]["replicatedJobs"]],
        "node_job": (
            node_job["template"]["spec"].get("parallelism"),
            node_job["template"]["spec"].get("completions"),
        ),
        "nodes": len({p.spec.node_name for p in pods}),
        "images": sorted({str(c.image) for p in pods for c in p.spec.containers}),
        "gpus_per_pod": sorted(
            {(c.resources.limits or {}).get("nvidia.com/gpu") for p in pods for c in p.spec.containers},
            key=str,
        ),
    }
    side.custom.patch_namespaced_custom_object(
        *TRAINJOB[:2], side.namespace, TRAINJOB[2], name, {"spec": {"suspend": True}}
    )
    side.wait(lambda: conditions(trainjob()).get("Suspended", ("", ""))[0] == "True", "never suspended")
    side.wait(lambda: bool(read_jobset(side, name)["spec"].get("suspend")), "the JobSet never suspended")
    side.wait(lambda: side.running(**labels) == 0, "the pods stayed")
    suspended = conditions(trainjob())["Suspended"]
    side.custom.patch_namespaced_custom_object(
        *TRAINJOB[:2], side.namespace, TRAINJOB[2], name, {"spec": {"suspend": False}}
    )
    side.wait(lambda: side.running(**labels) == 4, "4 pods never ran again")
    side.wait(lambda: conditions(trainjob()).get("Suspended", ("", ""))[0] != "True", "never resumed")
    resumed = conditions(trainjob()).get("Suspended")
    jobset_suspend = bool(read_jobset(side, name)["spec"].get("suspend"))
    foreground = client.V1DeleteOptions(propagation_policy="Foreground")

    def delete() -> None:
        side.custom.delete_namespaced_custom_object(
            *TRAINJOB[:2], side.namespace, TRAINJOB[2], name, body=foreground
        )
        with contextlib.suppress(client.ApiException):  # the emulator collects no garbage in general
            side.custom.delete_namespaced_custom_object(
                *JOBSET[:2], side.namespace, JOBSET[2], name, body=foreground
            )

    side.clean(delete)
    side.wait(lambda: not jobsets(side), "the JobSet stayed")
    return {**made, "suspended": suspended, "resumed": resumed, "jobset_suspended_after": jobset_suspend}


STORIES = {
    "jobset_suspend_toggle": suspend_story,
    "jobset_restart_on_eviction": restart_story,
    "jobset_without_a_policy_fails": no_policy_story,
    "jobset_restart_counted_towards_max": counted_restart_story,
    "jobset_max_restarts_reached": max_restarts_story,
    "jobset_fail_rule": fail_rule_story,
    "kueue_active_toggle": kueue_story,
    "kueue_jobset_active_toggle": kueue_jobset_story,
    "trainjob_suspend_toggle": trainjob_story,
}


@pytest.mark.parametrize("story", list(STORIES))
def test_the_emulated_workload_controllers_do_what_the_real_managers_do(
    real: Side, sim: Side, story: str
) -> None:
    """Same story, same observations on the emulator and on the real JobSet, Kueue and Trainer managers."""
    on_sim, on_real = STORIES[story](sim), STORIES[story](real)
    print(f"{story}: {on_real}")
    assert on_sim == on_real
