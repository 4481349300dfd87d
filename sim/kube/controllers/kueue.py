"""Kueue's Workload, queue and job-integration controllers (``kueue.x-k8s.io/v1beta1``), simplified.

Follows the Kueue docs (https://kueue.sigs.k8s.io/docs/concepts/workload/,
https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/, https://kueue.sigs.k8s.io/docs/tasks/run/jobs/):

- a batch/v1 Job or a JobSet labelled ``kueue.x-k8s.io/queue-name`` gets a Workload (named
  ``job-<name>-<hash>`` / ``jobset-<name>-<hash>``, owned by it, label ``kueue.x-k8s.io/job-uid``) with
  ``queueName``, ``podSets`` (count and template per Job / replicated job) and ``active: true``; the job
  must be created suspended, as Kueue's webhook makes it, and is kept suspended until admitted;
- admission, FIFO by creation time per ClusterQueue: a Workload whose LocalQueue points at a ClusterQueue
  is admitted when its ``nvidia.com/gpu`` requests fit the ClusterQueue's ``nominalQuota`` of that
  resource (summed over flavors) minus what admitted Workloads use: ``status.admission``, conditions
  ``QuotaReserved`` and ``Admitted``; the job is then unsuspended;
- ``spec.active: false`` evicts an admitted Workload as Kueue 0.17 does (checked against it by
  ``tests/realkube/test_differential_workloads.py``): ``Evicted`` True and ``Requeued`` False (reason
  ``Deactivated``), ``QuotaReserved`` False (``Pending``), ``Admitted`` False (``NoReservation``), one more
  eviction counted in ``status.schedulingStats.evictions`` (reason ``Deactivated``), admission and quota
  released, job suspended; setting it back to ``true`` marks it ``Requeued`` (``Reactivated``) and it is
  admitted again when quota allows (``Evicted`` False, reason ``QuotaReserved``);
- a finished job (Complete / Failed, or JobSet Completed / Failed) finishes its Workload (``Finished``),
  releasing its quota; a Workload whose job is gone is deleted.

Not emulated: cohorts, borrowing, preemption, fair sharing, flavors' node labels and taints, admission
checks, partial admission, waitForPodsReady, other integrations (RayJob, pod groups, ...), and the
LocalQueue / ClusterQueue status.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    GPU_RESOURCE,
    condition,
    format_time,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    pod_request,
    set_condition,
    try_update,
    uid_of,
    writable,
)
from sim.kube.controllers.jobset import API_VERSION as JOBSET_API_VERSION
from sim.kube.controllers.jobset import RESOURCE as JOBSETS
from sim.kube.controllers.workload_common import serves
from sim.kube.protocols import KubeObject, ObjectStore

WORKLOADS = "workloads.kueue.x-k8s.io"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
API_VERSION = "kueue.x-k8s.io/v1beta1"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
DEACTIVATED = "Deactivated"  # "InactiveWorkload" before Kueue 0.1x; 0.17 says Deactivated
_OWNER_KINDS = {"jobs.batch": ("Job", "batch/v1", "job"), JOBSETS: ("JobSet", JOBSET_API_VERSION, "jobset")}


def _is_true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def workload_name(prefix: str, job: Mapping[str, Any]) -> str:
    """``job-<name>-<5 hex>``: Kueue's name for the Workload of a job (the hash keeps it unique per uid)."""
    digest = hashlib.sha1(f"{name_of(job)}{uid_of(job)}".encode(), usedforsecurity=False).hexdigest()
    return f"{prefix}-{name_of(job)}-{digest[:5]}"


def _parallelism(job_spec: Mapping[str, Any]) -> int:
    value = job_spec.get("parallelism")
    return 1 if value is None else int(value)


def _pod_sets(resource: str, job: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = job.get("spec") or {}
    if resource == "jobs.batch":
        count = _parallelism(spec)
        return [{"name": "main", "count": count, "template": copy.deepcopy(spec.get("template") or {})}]
    pod_sets = []
    for replicated in spec.get("replicatedJobs") or []:
        job_spec = (replicated.get("template") or {}).get("spec") or {}
        parallelism = _parallelism(job_spec)
        pod_sets.append(
            {
                "name": str(replicated.get("name")),
                "count": int(replicated.get("replicas", 1)) * parallelism,
                "template": copy.deepcopy(job_spec.get("template") or {}),
            }
        )
    return pod_sets


def workload_gpus(workload: Mapping[str, Any]) -> int:
    """The ``nvidia.com/gpu`` a Workload asks for: sum over pod sets of count x per-pod request."""
    return sum(
        int(ps.get("count") or 0) * pod_request((ps.get("template") or {}).get("spec") or {})
        for ps in (workload.get("spec") or {}).get("podSets") or []
    )


def cluster_queue_gpus(cluster_queue: Mapping[str, Any]) -> int:
    """The ClusterQueue's ``nominalQuota`` of ``nvidia.com/gpu``, summed over resource groups and flavors."""
    total = 0
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU_RESOURCE:
                    total += int(str(resource.get("nominalQuota") or 0))
    return total


class KueueController:
    """Creates Workloads for queued jobs, admits them under ClusterQueue quota, and suspends or resumes the
    jobs to match."""

    name = "kueue"

    def reconcile(self, store: ObjectStore) -> None:
        """One pass of Kueue's job reconcilers, workload controller and scheduler."""
        if not serves(store, WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES):
            return
        cache = cache_for(store)
        owners = {r: cache.list(r) for r in _OWNER_KINDS if serves(store, r)}
        queued = {r: [j for j in jobs if labels_of(j).get(QUEUE_NAME_LABEL)] for r, jobs in owners.items()}
        if not any(queued.values()) and not cache.list(WORKLOADS):
            return
        workloads = {_owner_uid(w): w for w in cache.list(WORKLOADS)}
        for resource, jobs in queued.items():
            for job in jobs:
                if not is_terminating(job):
                    self._sync_job(store, resource, job, workloads.get(uid_of(job)))
        live = {uid_of(j) for jobs in owners.values() for j in jobs}
        for uid, workload in workloads.items():
            if uid and uid not in live:  # a Workload written without an owner is the user's to delete
                store.delete(WORKLOADS, namespace_of(workload), name_of(workload))
        _admit(store)

    def _sync_job(
        self, store: ObjectStore, resource: str, job: KubeObject, workload: KubeObject | None
    ) -> None:
        if workload is None:
            _create_workload(store, resource, job)
            return
        finished = any(_is_true(job, kind) for kind in ("Complete", "Completed", "Failed"))
        status: dict[str, Any] = copy.deepcopy(workload.get("status") or {})
        now = format_time(store)
        admitted = _is_true(workload, "Admitted")
        active = (workload.get("spec") or {}).get("active", True) is not False
        if finished:
            if not _is_true(workload, "Finished"):
                new = {
                    "type": "Finished",
                    "status": "True",
                    "reason": "JobFinished",
                    "message": "Job finished",
                }
                set_condition(status, new, now)
        elif not active:
            if admitted or status.get("admission"):
                _evict(status, now)
            _set_suspend(store, resource, job, True)
        else:
            _requeue_if_deactivated(status, now)
            _set_suspend(store, resource, job, not admitted)
        _write_status(store, workload, status)


def _owner_uid(workload: Mapping[str, Any]) -> str:
    refs = meta(workload).get("ownerReferences") or []
    return str(refs[0].get("uid")) if refs else ""


def _create_workload(store: ObjectStore, resource: str, job: KubeObject) -> None:
    kind, api_version, prefix = _OWNER_KINDS[resource]
    workload = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(prefix, job),
            "namespace": namespace_of(job),
            "labels": {JOB_UID_LABEL: uid_of(job)},
            "ownerReferences": [owner_reference(job, api_version, kind)],
        },
        "spec": {
            "queueName": labels_of(job)[QUEUE_NAME_LABEL],
            "podSets": _pod_sets(resource, job),
            "active": True,
        },
    }
    try:
        store.create(WORKLOADS, workload)
    except KeyError:
        return


def _evict(status: dict[str, Any], now: str) -> None:
    status.pop("admission", None)
    message = "The workload is deactivated"
    for kind, value, reason in (
        ("Evicted", "True", DEACTIVATED),
        ("QuotaReserved", "False", "Pending"),
        ("Admitted", "False", "NoReservation"),
        ("Requeued", "False", DEACTIVATED),
    ):
        set_condition(status, {"type": kind, "status": value, "reason": reason, "message": message}, now)
    evictions: list[dict[str, Any]] = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
    counted = next((e for e in evictions if e.get("reason") == DEACTIVATED), None)
    if counted is None:
        evictions.append({"reason": DEACTIVATED, "underlyingCause": "", "count": 1})
    else:
        counted["count"] = int(counted.get("count") or 0) + 1


def _requeue_if_deactivated(status: dict[str, Any], now: str) -> None:
    requeued = condition({"status": status}, "Requeued")
    if requeued is not None and requeued.get("status") == "False" and requeued.get("reason") == DEACTIVATED:
        new = {"type": "Requeued", "status": "True", "reason": "Reactivated"}
        set_condition(status, {**new, "message": "The workload was reactivated"}, now)


def _set_suspend(store: ObjectStore, resource: str, job: KubeObject, suspend: bool) -> None:
    if bool((job.get("spec") or {}).get("suspend")) != suspend:
        updated = writable(job)
        updated["spec"]["suspend"] = suspend
        try_update(store, resource, updated)


def _write_status(store: ObjectStore, workload: KubeObject, status: dict[str, Any]) -> None:
    if status != (workload.get("status") or {}):
        updated = writable(workload)
        updated["status"] = status
        try_update(store, WORKLOADS, updated)


def _admit(store: ObjectStore) -> None:
    """Kueue's scheduler, one ClusterQueue at a time, oldest pending Workload first (StrictFIFO)."""
    cache = cache_for(store)
    queues = {
        (namespace_of(q), name_of(q)): str((q.get("spec") or {}).get("clusterQueue"))
        for q in cache.list(LOCAL_QUEUES)
    }
    used: dict[str, int] = {}
    pending: list[tuple[str, KubeObject]] = []
    for workload in sorted(cache.list(WORKLOADS), key=lambda w: str(meta(w).get("creationTimestamp") or "")):
        cq = queues.get((namespace_of(workload), str((workload.get("spec") or {}).get("queueName"))))
        if cq is None or _is_true(workload, "Finished"):
            continue
        if (workload.get("status") or {}).get("admission"):
            used[cq] = used.get(cq, 0) + workload_gpus(workload)
        elif (workload.get("spec") or {}).get("active", True) is not False:
            pending.append((cq, workload))
    for cq_name, workload in pending:
        cluster_queue = cache.get(CLUSTER_QUEUES, None, cq_name)
        if cluster_queue is None:
            continue
        need = workload_gpus(workload)
        if used.get(cq_name, 0) + need > cluster_queue_gpus(cluster_queue):
            continue
        used[cq_name] = used.get(cq_name, 0) + need
        _write_status(store, workload, _admitted_status(store, workload, cq_name))


def _admitted_status(store: ObjectStore, workload: KubeObject, cq_name: str) -> dict[str, Any]:
    now = format_time(store)
    status: dict[str, Any] = copy.deepcopy(workload.get("status") or {})
    status["admission"] = {
        "clusterQueue": cq_name,
        "podSetAssignments": [
            {
                "name": ps.get("name"),
                "count": ps.get("count"),
                "resourceUsage": {
                    GPU_RESOURCE: str(
                        int(ps.get("count") or 0) * pod_request((ps.get("template") or {}).get("spec") or {})
                    )
                },
            }
            for ps in (workload.get("spec") or {}).get("podSets") or []
        ],
    }
    message = f"Quota reserved in ClusterQueue {cq_name}"
    set_condition(
        status,
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": message},
        now,
    )
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted"}
    set_condition(status, {**admitted, "message": "The workload is admitted"}, now)
    if _is_true({"status": status}, "Evicted"):
        readmitted = {"type": "Evicted", "status": "False", "reason": "QuotaReserved"}
        set_condition(status, {**readmitted, "message": "Previously: The workload is deactivated"}, now)
    return status
