"""The Kubeflow Training Operator's PyTorchJob controller (``kubeflow.org/v1``).

Follows the PyTorchJob guide (https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/)
and the training-operator's common job controller:

- ``spec.pytorchReplicaSpecs`` ``Master`` and ``Worker`` (``replicas``, ``restartPolicy``, ``template``)
  become pods directly (no Jobs) named ``<job>-<type>-<index>`` (type lower-cased), labelled
  ``training.kubeflow.org/job-name``, ``operator-name: pytorchjob-controller``, ``replica-type``,
  ``replica-index`` and ``job-role: master`` on master 0, owned by the PyTorchJob;
- per-replica ``restartPolicy`` (default ``OnFailure``): the pod gets ``Always`` / ``OnFailure`` / ``Never``
  as written and ``Never`` for ``ExitCode``; a pod that is deleted (evicted) is recreated under every
  policy; a Failed pod is deleted and recreated under ``OnFailure`` / ``Always``, and under ``ExitCode``
  when its exit code is retryable (130, 137, 138, 143: signals the operator treats as transient); under
  ``Never``, or ``ExitCode`` with another code, the job fails;
- ``runPolicy.suspend`` deletes the pods (condition ``Suspended``) and resuming recreates them;
- conditions ``Created``, ``Running``, ``Restarting``, ``Succeeded`` (Master succeeded, or every Worker
  without a Master), ``Failed``, ``Suspended``, with reasons ``PyTorchJob<Condition>``;
  ``status.replicaStatuses`` (active, succeeded, failed), ``startTime``, ``completionTime``.

Not emulated: elastic policy, ``nprocPerNode`` and the torchrun environment, the master Service,
``runPolicy.backoffLimit`` / ``activeDeadlineSeconds`` / ``cleanPodPolicy`` / ``ttlSecondsAfterFinished``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    format_time,
    is_terminating,
    name_of,
    namespace_of,
    owner_reference,
    phase_of,
    set_condition,
    try_update,
    uid_of,
    writable,
)
from sim.kube.controllers.workload_common import delete_pod, group_by_controller, serves
from sim.kube.protocols import KubeObject, ObjectStore

RESOURCE = "pytorchjobs.kubeflow.org"
API_VERSION = "kubeflow.org/v1"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
_REPLICA_TYPES = ("Master", "Worker")


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode") or 0) != 0:
            return int(terminated["exitCode"])
    return None


def restarts_failed_pod(policy: str, pod: Mapping[str, Any]) -> bool:
    """Whether a Failed pod is replaced (True) or fails the job (False) under a replica restartPolicy."""
    if policy in ("OnFailure", "Always"):
        return True
    if policy == "ExitCode":
        return _exit_code(pod) in RETRYABLE_EXIT_CODES
    return False


class PyTorchJobController:
    """Runs PyTorchJobs' replica pods as the training operator does."""

    name = "pytorchjob"

    def reconcile(self, store: ObjectStore) -> None:
        """Reconcile every PyTorchJob with its pods."""
        if not serves(store, RESOURCE):
            return
        cache = cache_for(store)
        jobs = cache.list(RESOURCE)
        if not jobs:
            return
        pods_by_owner = group_by_controller(cache.list("pods"), "PyTorchJob")
        for job in jobs:
            if not is_terminating(job):
                _PyTorchJobSync(store, job, pods_by_owner.get(uid_of(job), [])).run()


class _PyTorchJobSync:
    """One reconcile of one PyTorchJob."""

    def __init__(self, store: ObjectStore, job: KubeObject, pods: list[KubeObject]) -> None:
        self.store = store
        self.job = job
        self.pods = {name_of(p): p for p in pods}
        self.specs: Mapping[str, Any] = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        self.status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        self.now = format_time(store)
        self.restarting = False

    def _set(self, kind: str, status: str, message: str) -> None:
        reason = f"PyTorchJob{kind}"
        new = {"type": kind, "status": status, "reason": reason, "message": message}
        set_condition(self.status, new, self.now)

    def _finished(self) -> bool:
        return any(
            (c := condition(self.job, kind)) is not None and c.get("status") == "True"
            for kind in ("Succeeded", "Failed")
        )

    def run(self) -> None:
        if not self.status.get("conditions"):
            self._set("Created", "True", f"PyTorchJob {name_of(self.job)} is created.")
        if not self._finished():
            if ((self.job.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
                self._suspend()
            else:
                self._resume_if_suspended()
                self._sync_pods()
        self._write_status()

    def _slots(self) -> list[tuple[str, int, Mapping[str, Any]]]:
        slots: list[tuple[str, int, Mapping[str, Any]]] = []
        for replica_type in _REPLICA_TYPES:
            spec = self.specs.get(replica_type)
            if spec is not None:
                slots.extend((replica_type, i, spec) for i in range(int(spec.get("replicas", 1))))
        return slots

    def _pod_name(self, replica_type: str, index: int) -> str:
        return f"{name_of(self.job)}-{replica_type.lower()}-{index}"

    def _suspend(self) -> None:
        for pod in self.pods.values():
            delete_pod(self.store, pod)
        self._set("Suspended", "True", f"PyTorchJob {name_of(self.job)} is suspended.")
        self._set("Running", "False", f"PyTorchJob {name_of(self.job)} is suspended.")
        self.status.pop("startTime", None)

    def _resume_if_suspended(self) -> None:
        suspended = condition(self.job, "Suspended")
        if suspended is not None and suspended.get("status") == "True":
            self._set("Suspended", "False", f"PyTorchJob {name_of(self.job)} is resumed.")
        self.status.setdefault("startTime", self.now)

    def _sync_pods(self) -> None:
        for replica_type, index, spec in self._slots():
            pod = self.pods.get(self._pod_name(replica_type, index))
            if pod is None:
                self._create_pod(replica_type, index, spec)
            elif not is_terminating(pod) and phase_of(pod) == "Failed":
                policy = str(spec.get("restartPolicy") or "OnFailure")
                if not restarts_failed_pod(policy, pod):
                    self._set(
                        "Failed",
                        "True",
                        f"PyTorchJob {name_of(self.job)} is failed because "
                        f"{replica_type} replica {index} failed.",
                    )
                    self._set("Running", "False", "")
                    return
                delete_pod(self.store, pod)
                self.restarting = True
        self._check_success()

    def _check_success(self) -> None:
        def succeeded(replica_type: str) -> bool:
            slots = [s for s in self._slots() if s[0] == replica_type]
            names = [self._pod_name(t, i) for t, i, _ in slots]
            return bool(slots) and all(phase_of(self.pods.get(n) or {}) == "Succeeded" for n in names)

        done = succeeded("Master") if "Master" in self.specs else succeeded("Worker")
        if done:
            self._set("Succeeded", "True", f"PyTorchJob {name_of(self.job)} is successfully completed.")
            self._set("Running", "False", "")
            self.status["completionTime"] = self.now

    def _create_pod(self, replica_type: str, index: int, spec: Mapping[str, Any]) -> None:
        template = copy.deepcopy(spec.get("template") or {})
        pod_spec: dict[str, Any] = template.get("spec") or {}
        policy = str(spec.get("restartPolicy") or "OnFailure")
        pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            JOB_NAME_LABEL: name_of(self.job),
            OPERATOR_LABEL: "pytorchjob-controller",
            REPLICA_TYPE_LABEL: replica_type.lower(),
            REPLICA_INDEX_LABEL: str(index),
        }
        if replica_type == "Master" and index == 0:
            labels[JOB_ROLE_LABEL] = "master"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self._pod_name(replica_type, index),
                "namespace": namespace_of(self.job),
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [owner_reference(self.job, API_VERSION, "PyTorchJob")],
            },
            "spec": pod_spec,
        }
        try:
            created = self.store.create("pods", pod)
        except KeyError:
            return
        self.pods[name_of(created)] = created

    def _replica_statuses(self) -> dict[str, dict[str, int]]:
        statuses: dict[str, dict[str, int]] = {}
        for replica_type, index, _ in self._slots():
            entry = statuses.setdefault(replica_type, {"active": 0, "succeeded": 0, "failed": 0})
            pod = self.pods.get(self._pod_name(replica_type, index))
            phase = phase_of(pod) if pod is not None else ""
            if phase in ("Pending", "Running") and pod is not None and not is_terminating(pod):
                entry["active"] += 1
            elif phase == "Succeeded":
                entry["succeeded"] += 1
            elif phase == "Failed":
                entry["failed"] += 1
        return statuses

    def _write_status(self) -> None:
        if not self._finished() and not self.status.get("completionTime"):
            slots = self._slots()
            running = [
                p
                for t, i, _ in slots
                if (p := self.pods.get(self._pod_name(t, i))) is not None
                and phase_of(p) == "Running"
                and not is_terminating(p)
            ]
            name = name_of(self.job)
            failed_cond = condition({"status": self.status}, "Failed")
            if self.restarting:
                self._set("Restarting", "True", f"PyTorchJob {name} is restarting because a replica failed.")
                self._set("Running", "False", f"PyTorchJob {name} is restarting.")
            elif slots and len(running) == len(slots) and failed_cond is None:
                self._set("Running", "True", f"PyTorchJob {name} is running.")
                if condition({"status": self.status}, "Restarting") is not None:
                    self._set("Restarting", "False", f"PyTorchJob {name} is running.")
        self.status["replicaStatuses"] = self._replica_statuses()
        if self.status != (self.job.get("status") or {}):
            updated = writable(self.job)
            updated["status"] = self.status
            try_update(self.store, RESOURCE, updated)
