"""The Volcano job controller (``batch.volcano.sh/v1alpha1`` Job, ``bus.volcano.sh/v1alpha1`` Command).

Follows Volcano's VolcanoJob docs (https://volcano.sh/en/docs/vcjob/) and its job controller:

- ``spec.tasks[]`` (``name``, ``replicas``, ``template``) become pods named ``<job>-<task>-<index>`` with
  the ``volcano.sh/job-name``, ``volcano.sh/job-namespace``, ``volcano.sh/queue-name`` and
  ``volcano.sh/task-spec`` labels and the ``volcano.sh/job-version`` / ``volcano.sh/task-index``
  annotations, owned by the Job;
- ``policies`` (task-level first, then job-level): ``event`` or ``events`` (``PodFailed``, ``PodEvicted``,
  ``*``) or ``exitCode``, and an ``action``: ``RestartJob`` (every pod killed, ``status.version`` and
  ``retryCount`` bumped, phase Restarting, then the pods recreated; once ``retryCount`` reaches
  ``maxRetry``, default 3, the job fails instead), ``AbortJob`` (Aborting -> Aborted), ``TerminateJob``
  (Terminating -> Terminated), ``CompleteJob`` (Completing -> Completed), ``RestartTask``, ``RestartPod``;
  a pod of the current version that is deleted by someone else (or carries ``DisruptionTarget``) is
  ``PodEvicted``; without a matching policy a missing pod is recreated;
- a ``Command`` whose ``target`` is an ownerReference to a Job applies its ``action`` (``RestartJob``,
  ``AbortJob``, ``ResumeJob``, ``TerminateJob``, ``CompleteJob``) and is consumed (deleted), as
  ``vcctl job restart`` relies on;
- phases Pending -> Running (at least ``minAvailable`` pods Running, default: all) -> Completed (every pod
  Succeeded) or Failed; ``status.state``, ``version``, ``retryCount``, ``minAvailable``, pod counts,
  ``conditions``.

Not emulated: the Volcano scheduler (gang scheduling, queues, PodGroups: pods are placed by the default
scheduler, so ``schedulerName`` is not copied), plugins (svc, ssh, env), ``TaskCompleted`` and the other
events, ``timeout`` on policies, ``ttlSecondsAfterFinished``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    format_time,
    is_terminal,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    phase_of,
    try_update,
    uid_of,
    writable,
)
from sim.kube.controllers.workload_common import delete_pod, group_by_controller, serves
from sim.kube.protocols import KubeObject, ObjectStore

RESOURCE = "jobs.batch.volcano.sh"
COMMANDS = "commands.bus.volcano.sh"
API_VERSION = "batch.volcano.sh/v1alpha1"
JOB_NAME_KEY = "volcano.sh/job-name"
JOB_NAMESPACE_KEY = "volcano.sh/job-namespace"
QUEUE_NAME_KEY = "volcano.sh/queue-name"
TASK_SPEC_KEY = "volcano.sh/task-spec"
JOB_VERSION_KEY = "volcano.sh/job-version"
TASK_INDEX_KEY = "volcano.sh/task-index"
_DEFAULT_MAX_RETRY = 3
# Phases in which pods are being killed, and the phase each one ends in once no pod is left.
_KILLING = {
    "Restarting": "Pending",
    "Aborting": "Aborted",
    "Terminating": "Terminated",
    "Completing": "Completed",
}
_FINAL = frozenset({"Aborted", "Terminated", "Completed", "Failed"})


def _version(pod: Mapping[str, Any]) -> str:
    return str((meta(pod).get("annotations") or {}).get(JOB_VERSION_KEY) or "0")


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode") or 0) != 0:
            return int(terminated["exitCode"])
    return None


def _policy_matches(policy: Mapping[str, Any], event: str, pod: Mapping[str, Any]) -> bool:
    if policy.get("exitCode") is not None:
        return event == "PodFailed" and _exit_code(pod) == int(policy["exitCode"])
    events = [*(policy.get("events") or []), *([policy["event"]] if policy.get("event") else [])]
    return event in events or "*" in events


class VolcanoJobController:
    """Runs Volcano Jobs' task pods, applies their policies and consumes Commands."""

    name = "volcano"

    def reconcile(self, store: ObjectStore) -> None:
        """Consume Commands, then reconcile every Volcano Job with its pods."""
        if not serves(store, RESOURCE, COMMANDS):
            return
        cache = cache_for(store)
        jobs = cache.list(RESOURCE)
        if not jobs:
            return
        commands = _commands_by_target(cache.list(COMMANDS))
        pods_by_owner = group_by_controller(cache.list("pods"), "Job")
        for job in jobs:
            if is_terminating(job):
                continue
            sync = _VolcanoJobSync(store, job, pods_by_owner.get(uid_of(job), []))
            for command in commands.get(uid_of(job), []) + commands.get(_name_key(job), []):
                sync.apply(str(command.get("action")))
                store.delete(COMMANDS, namespace_of(command), name_of(command))
            sync.run()


def _name_key(job: Mapping[str, Any]) -> str:
    return f"{namespace_of(job)}/{name_of(job)}"


def _commands_by_target(commands: list[KubeObject]) -> dict[str, list[KubeObject]]:
    """Commands keyed by the target's uid, or by namespace/name when the target has no uid."""
    grouped: dict[str, list[KubeObject]] = {}
    for command in commands:
        target = command.get("target") or {}
        if target.get("kind") != "Job" or not str(target.get("apiVersion", "")).startswith(
            "batch.volcano.sh"
        ):
            continue
        key = str(target.get("uid") or f"{namespace_of(command)}/{target.get('name')}")
        grouped.setdefault(key, []).append(command)
    return grouped


class _VolcanoJobSync:
    """One reconcile of one Volcano Job."""

    def __init__(self, store: ObjectStore, job: KubeObject, pods: list[KubeObject]) -> None:
        self.store = store
        self.job = job
        self.pods = pods
        self.spec: Mapping[str, Any] = job.get("spec") or {}
        self.status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        self.status.setdefault("state", {"phase": "Pending"})
        self.status.setdefault("version", 0)
        self.status.setdefault("retryCount", 0)
        self.now = format_time(store)

    @property
    def phase(self) -> str:
        return str(self.status["state"].get("phase") or "Pending")

    def _set_phase(self, phase: str, reason: str = "", message: str = "") -> None:
        if phase == self.phase:
            return
        self.status["state"] = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "lastTransitionTime": self.now,
        }
        self.status.setdefault("conditions", []).append({"status": phase, "lastTransitionTime": self.now})

    # --- actions -----------------------------------------------------------------------------------

    def apply(self, action: str, pod: Mapping[str, Any] | None = None) -> None:
        """Carry out one policy or Command action."""
        if action == "RestartJob":
            if int(self.status["retryCount"]) >= int(self.spec.get("maxRetry") or _DEFAULT_MAX_RETRY):
                self._kill_all()
                self._set_phase("Failed", "MaxRetryReached", "the job reached maxRetry")
                return
            self.status["retryCount"] = int(self.status["retryCount"]) + 1
            self.status["version"] = int(self.status["version"]) + 1
            self._kill_all()
            self._set_phase("Restarting", action)
        elif action in ("AbortJob", "TerminateJob", "CompleteJob"):
            self._kill_all()
            self._set_phase(
                {"AbortJob": "Aborting", "TerminateJob": "Terminating"}.get(action, "Completing"), action
            )
        elif action == "ResumeJob" and self.phase in ("Aborted", "Aborting"):
            self.status["version"] = int(self.status["version"]) + 1
            self._set_phase("Pending", action)
        elif action in ("RestartTask", "RestartPod") and pod is not None:
            task = (meta(pod).get("labels") or {}).get(TASK_SPEC_KEY)
            for victim in self.pods:
                if victim is pod or (action == "RestartTask" and labels_task(victim) == task):
                    delete_pod(self.store, victim)

    def _kill_all(self) -> None:
        for pod in self.pods:
            delete_pod(self.store, pod)

    # --- the reconcile ----------------------------------------------------------------------------

    def run(self) -> None:
        if self.phase in _KILLING and not self.pods:
            self._set_phase(_KILLING[self.phase])
        if self.phase not in _FINAL and self.phase not in _KILLING:
            self._react_to_pods()
        if self.phase not in _FINAL and self.phase not in _KILLING:
            self._create_missing()
            self._update_phase()
        self._write_status()

    def _current(self) -> list[KubeObject]:
        return [p for p in self.pods if _version(p) == str(self.status["version"])]

    def _react_to_pods(self) -> None:
        for pod in self._current():
            evicted = is_terminating(pod) or (
                (found := condition(pod, "DisruptionTarget")) is not None and found.get("status") == "True"
            )
            event = "PodEvicted" if evicted else "PodFailed" if phase_of(pod) == "Failed" else None
            if event is None:
                continue
            action = self._policy_action(event, pod)
            if action is not None:
                self.apply(action, pod)
                return

    def _policy_action(self, event: str, pod: Mapping[str, Any]) -> str | None:
        task_name = labels_task(pod)
        tasks: list[Mapping[str, Any]] = list(self.spec.get("tasks") or [])
        task: Mapping[str, Any] = next((t for t in tasks if t.get("name") == task_name), {})
        for policy in [*(task.get("policies") or []), *(self.spec.get("policies") or [])]:
            if _policy_matches(policy, event, pod):
                return str(policy.get("action"))
        return None

    def _create_missing(self) -> None:
        # A name still held by a pod (even a terminating one of an older version) waits until it is free.
        present = {name_of(p) for p in self.pods}
        for task in self.spec.get("tasks") or []:
            for index in range(int(task.get("replicas", 1))):
                name = f"{name_of(self.job)}-{task.get('name')}-{index}"
                if name not in present:
                    self._create_pod(task, index, name)

    def _create_pod(self, task: Mapping[str, Any], index: int, name: str) -> None:
        template = copy.deepcopy(task.get("template") or {})
        template_meta = template.get("metadata") or {}
        labels = {
            **(template_meta.get("labels") or {}),
            JOB_NAME_KEY: name_of(self.job),
            JOB_NAMESPACE_KEY: namespace_of(self.job),
            QUEUE_NAME_KEY: str(self.spec.get("queue") or "default"),
            TASK_SPEC_KEY: str(task.get("name")),
        }
        annotations = {
            **(template_meta.get("annotations") or {}),
            JOB_NAME_KEY: name_of(self.job),
            TASK_SPEC_KEY: str(task.get("name")),
            JOB_VERSION_KEY: str(self.status["version"]),
            TASK_INDEX_KEY: str(index),
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace_of(self.job),
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [owner_reference(self.job, API_VERSION, "Job")],
            },
            "spec": template.get("spec") or {},
        }
        try:
            self.pods.append(self.store.create("pods", pod))
        except KeyError:
            return

    def _update_phase(self) -> None:
        current = [p for p in self._current() if not is_terminating(p)]
        total = sum(int(t.get("replicas", 1)) for t in self.spec.get("tasks") or [])
        min_available = int(self.spec.get("minAvailable") or total)
        running = sum(1 for p in current if phase_of(p) == "Running")
        succeeded = sum(1 for p in current if phase_of(p) == "Succeeded")
        if total and succeeded >= total:
            self._set_phase("Completed")
        elif total and len(current) == total and all(is_terminal(p) for p in current):
            self._set_phase("Failed", "PodFailed", "every pod finished and not all succeeded")
        elif running + succeeded >= min_available and running:
            self._set_phase("Running")

    def _write_status(self) -> None:
        current = self._current()
        total = sum(int(t.get("replicas", 1)) for t in self.spec.get("tasks") or [])
        self.status["minAvailable"] = int(self.spec.get("minAvailable") or total)
        counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "terminating": 0}
        for pod in current:
            if is_terminating(pod):
                counts["terminating"] += 1
            else:
                counts[phase_of(pod).lower() if phase_of(pod) != "Unknown" else "pending"] += 1
        self.status.update(counts)
        if self.status != (self.job.get("status") or {}):
            updated = writable(self.job)
            updated["status"] = self.status
            try_update(self.store, RESOURCE, updated)


def labels_task(pod: Mapping[str, Any]) -> str | None:
    """The task a pod belongs to (its ``volcano.sh/task-spec`` label)."""
    value = (meta(pod).get("labels") or {}).get(TASK_SPEC_KEY)
    return str(value) if value is not None else None
