"""The Job controller (batch/v1), for the training jobs the agent requeues.

Follows "Jobs" (https://kubernetes.io/docs/concepts/workloads/controllers/job/) and "Handling retriable and
non-retriable pod failures with Pod failure policy"
(https://kubernetes.io/docs/tasks/job/pod-failure-policy/):

- pods are created from the template up to ``parallelism`` and the remaining ``completions``; NonIndexed
  pods are named ``<job>-<random>``, Indexed ones ``<job>-<index>-<random>`` with the
  ``batch.kubernetes.io/job-completion-index`` annotation and label, hostname ``<job>-<index>`` and
  ``JOB_COMPLETION_INDEX`` in the environment;
- pods carry ``batch.kubernetes.io/job-name`` / ``controller-uid`` labels (and the legacy ``job-name`` /
  ``controller-uid``), a controller ownerReference and the ``batch.kubernetes.io/job-tracking`` finalizer
  that is removed once the pod's outcome is counted ("Job tracking with finalizers");
- a pod counts as failed when its phase is Failed or, unless ``podReplacementPolicy: Failed`` or a
  ``podFailurePolicy`` is set, as soon as it is terminating; replacements follow the same rule
  ("Delayed creation of replacement pods");
- ``podFailurePolicy`` rules (``onExitCodes``, ``onPodConditions``) are tried in order; the first match's
  action decides: ``FailJob``, ``Ignore`` (not counted against ``backoffLimit``), ``Count``, ``FailIndex``;
- more failures than ``backoffLimit`` (default 6; container restarts count under ``OnFailure``) fail the
  Job with reason ``BackoffLimitExceeded``; ``activeDeadlineSeconds`` with ``DeadlineExceeded``;
- ``suspend: true`` deletes the active pods (not counted as failures) and sets condition Suspended;
  ``suspend: false`` resumes and resets ``startTime``;
- status: ``active``, ``ready``, ``succeeded``, ``failed``, ``terminating``, ``startTime``,
  ``completionTime``, ``completedIndexes``, ``failedIndexes``, conditions Complete / Failed / Suspended.

Not emulated: pod creation backoff delays, ``backoffLimitPerIndex``, ``successPolicy``,
``ttlSecondsAfterFinished``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    controller_ref,
    format_time,
    graceful_delete,
    is_terminal,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    phase_of,
    set_condition,
    termination_grace,
    try_update,
    uid_of,
    writable,
)
from sim.kube.controllers.kubelet import parse_time
from sim.kube.disruption import is_pod_ready
from sim.kube.protocols import KubeObject, ObjectStore

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
_DEFAULT_BACKOFF_LIMIT = 6


@dataclass
class _Tally:
    """What one reconcile learned from the pods whose outcome was not yet counted."""

    succeeded: int = 0
    failed: int = 0
    completed_indexes: set[int] = field(default_factory=set)
    failed_indexes: set[int] = field(default_factory=set)
    fail_job_message: str | None = None
    counted: list[KubeObject] = field(default_factory=list)


def _index_of(pod: Mapping[str, Any]) -> int | None:
    value = (meta(pod).get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_indexes(text: str | None) -> set[int]:
    """``"1,3-5"`` -> {1, 3, 4, 5} (the format of ``completedIndexes``)."""
    indexes: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            indexes.update(range(int(low), int(high) + 1))
        elif part.strip():
            indexes.add(int(part))
    return indexes


def format_indexes(indexes: set[int]) -> str:
    """{1, 3, 4, 5} -> ``"1,3-5"``."""
    ordered = sorted(indexes)
    parts: list[str] = []
    start = previous = None
    for index in [*ordered, None]:
        if start is not None and (index is None or index != (previous or 0) + 1):
            parts.append(str(start) if start == previous else f"{start}-{previous}")
            start = None
        if index is not None and start is None:
            start = index
        previous = index
    return ",".join(parts)


def _exit_codes(pod: Mapping[str, Any], container_name: str | None) -> list[int]:
    codes = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and (container_name is None or status.get("name") == container_name):
            codes.append(int(terminated.get("exitCode") or 0))
    return codes


def _rule_matches(rule: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    """A description of why the rule matches the failed pod, or None."""
    on_codes = rule.get("onExitCodes")
    if on_codes:
        values = {int(v) for v in on_codes.get("values") or []}
        wanted_in = on_codes.get("operator") == "In"
        for code in _exit_codes(pod, on_codes.get("containerName")):
            # Exit code 0 never matches (docs: "the exit code 0 is excluded").
            if code != 0 and (code in values) == wanted_in:
                return f"failed with exit code {code}"
    for pattern in rule.get("onPodConditions") or []:
        found = condition(pod, str(pattern.get("type")))
        if found is not None and found.get("status") == (pattern.get("status") or "True"):
            return f"has condition {pattern.get('type')}"
    return None


def _failure_action(job: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[str, str | None]:
    """(action, FailJob message) for a failed pod under the Job's podFailurePolicy; Count by default."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    for number, rule in enumerate(rules):
        why = _rule_matches(rule, pod)
        if why is not None:
            action = str(rule.get("action"))
            pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
            return action, f"Pod {pod_ref} {why} matching {action} rule at index {number}"
    return "Count", None


class JobController:
    """Runs batch/v1 Jobs to completion or failure."""

    name = "job"

    def reconcile(self, store: ObjectStore) -> None:
        """Count finished pods, decide the Jobs' fate, and create or delete pods to match."""
        cache = cache_for(store)
        jobs = cache.list("jobs.batch")
        if not jobs:
            return
        pods_by_job: dict[str, list[KubeObject]] = {}
        for pod in cache.list("pods"):
            owner = controller_ref(pod)
            if owner is not None and owner.get("kind") == "Job":
                pods_by_job.setdefault(str(owner.get("uid")), []).append(pod)
        for job in jobs:
            if not is_terminating(job):
                _JobSync(store, job, pods_by_job.get(uid_of(job), [])).run()


class _JobSync:
    """One reconcile of one Job."""

    def __init__(self, store: ObjectStore, job: KubeObject, pods: list[KubeObject]) -> None:
        self.store = store
        self.job = job
        self.pods = pods
        self.spec: Mapping[str, Any] = job.get("spec") or {}
        self.status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        self.now = format_time(store)
        self.indexed = self.spec.get("completionMode") == "Indexed"
        self.only_failed = self.spec.get("podReplacementPolicy") == "Failed" or bool(
            self.spec.get("podFailurePolicy")
        )

    # --- classification ------------------------------------------------------------------------------

    def _is_failed(self, pod: Mapping[str, Any]) -> bool:
        if phase_of(pod) == "Failed":
            return True
        if self.only_failed:
            return False
        return is_terminating(pod) and phase_of(pod) != "Succeeded"

    def _active(self) -> list[KubeObject]:
        return [p for p in self.pods if not is_terminal(p) and not is_terminating(p)]

    def _occupying(self) -> list[KubeObject]:
        """Pods holding a slot: active ones, and terminating ones when only Failed pods are replaced."""
        return [p for p in self.pods if not is_terminal(p) and (self.only_failed or not is_terminating(p))]

    def _finished_condition(self) -> str | None:
        for kind in ("Complete", "Failed"):
            found = condition(self.job, kind)
            if found is not None and found.get("status") == "True":
                return kind
        return None

    # --- the reconcile --------------------------------------------------------------------------------

    def run(self) -> None:
        if self._finished_condition() is not None:
            self._delete_active(count=False)
            self._release_all()
            return
        tally = self._tally()
        self._apply_tally(tally)
        failure = self._failure(tally)
        if failure is not None:
            self._finish("Failed", *failure)
        elif self._complete():
            self._finish("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
        elif self.spec.get("suspend"):
            self._suspend()
        else:
            self._resume_if_suspended()
            self._create_missing()
        self._write_status(tally)

    def _tally(self) -> _Tally:
        tally = _Tally()
        for pod in self.pods:
            if TRACKING_FINALIZER not in (meta(pod).get("finalizers") or []):
                continue
            index = _index_of(pod)
            if phase_of(pod) == "Succeeded":
                tally.succeeded += 1
                if index is not None:
                    tally.completed_indexes.add(index)
            elif self._is_failed(pod):
                self._tally_failure(tally, pod, index)
            else:
                continue
            tally.counted.append(pod)
        return tally

    def _tally_failure(self, tally: _Tally, pod: KubeObject, index: int | None) -> None:
        action, message = _failure_action(self.job, pod) if phase_of(pod) == "Failed" else ("Count", None)
        if action == "Ignore":
            return
        tally.failed += 1
        if action == "FailJob" and tally.fail_job_message is None:
            tally.fail_job_message = message
        if action == "FailIndex" and index is not None:
            tally.failed_indexes.add(index)

    def _apply_tally(self, tally: _Tally) -> None:
        self.status["succeeded"] = int(self.status.get("succeeded") or 0) + tally.succeeded
        self.status["failed"] = int(self.status.get("failed") or 0) + tally.failed
        if self.indexed:
            done = parse_indexes(self.status.get("completedIndexes")) | tally.completed_indexes
            self.status["completedIndexes"] = format_indexes(done)
            failed = parse_indexes(self.status.get("failedIndexes")) | tally.failed_indexes
            if failed:
                self.status["failedIndexes"] = format_indexes(failed)

    def _failure(self, tally: _Tally) -> tuple[str, str] | None:
        if tally.fail_job_message is not None:
            return "PodFailurePolicy", tally.fail_job_message
        restarts = 0
        if (self.spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure":
            for pod in self._active():
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    restarts += int(status.get("restartCount") or 0)
        limit = self.spec.get("backoffLimit")
        limit = _DEFAULT_BACKOFF_LIMIT if limit is None else int(limit)
        if int(self.status["failed"]) + restarts > limit:
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        deadline = self.spec.get("activeDeadlineSeconds")
        started = self.status.get("startTime")
        if deadline is not None and started and not self.spec.get("suspend"):
            elapsed = (self.store.clock.now() - parse_time(str(started))).total_seconds()
            if elapsed >= int(deadline):
                return "DeadlineExceeded", "Job was active longer than specified deadline"
        if (
            self.indexed
            and self.status.get("failedIndexes")
            and not self._pending_indexes(ignore_failed=False)
        ):
            return "FailedIndexes", "Job has failed indexes"
        return None

    def _completions(self) -> int | None:
        value = self.spec.get("completions")
        return None if value is None else int(value)

    def _parallelism(self) -> int:
        value = self.spec.get("parallelism")
        return 1 if value is None else int(value)

    def _complete(self) -> bool:
        completions = self._completions()
        succeeded = int(self.status["succeeded"])
        if self.indexed and completions is not None:
            done = parse_indexes(self.status.get("completedIndexes"))
            return len([i for i in done if i < completions]) >= completions
        if completions is None:
            return succeeded >= 1 and not self._active()
        return succeeded >= completions

    def _pending_indexes(self, *, ignore_failed: bool = True) -> list[int]:
        completions = self._completions() or 0
        done = parse_indexes(self.status.get("completedIndexes"))
        failed = parse_indexes(self.status.get("failedIndexes"))
        occupied = {_index_of(p) for p in self._occupying()}
        return [
            i
            for i in range(completions)
            if i not in done and i not in occupied and (not ignore_failed or i not in failed)
        ]

    # --- actions --------------------------------------------------------------------------------------

    def _finish(self, kind: str, reason: str, message: str) -> None:
        if kind == "Complete":
            self.status["completionTime"] = self.now
        set_condition(
            self.status, {"type": kind, "status": "True", "reason": reason, "message": message}, self.now
        )
        self._delete_active(count=kind == "Failed")

    def _suspend(self) -> None:
        self._delete_active(count=False)
        set_condition(
            self.status,
            {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended"},
            self.now,
        )
        self.status.pop("startTime", None)

    def _resume_if_suspended(self) -> None:
        suspended = condition(self.job, "Suspended")
        if suspended is not None and suspended.get("status") == "True":
            set_condition(
                self.status,
                {"type": "Suspended", "status": "False", "reason": "JobResumed", "message": "Job resumed"},
                self.now,
            )
            self.status["startTime"] = self.now
        self.status.setdefault("startTime", self.now)

    def _delete_active(self, *, count: bool) -> None:
        """Delete the running pods; unless ``count``, release them first so they never count as failures."""
        for pod in self._active():
            if not count:
                self._release(pod)
            graceful_delete(self.store, "pods", pod, termination_grace(pod))

    def _release(self, pod: KubeObject) -> None:
        finalizers = meta(pod).get("finalizers") or []
        if TRACKING_FINALIZER in finalizers:
            released = writable(pod)
            released["metadata"]["finalizers"] = [f for f in finalizers if f != TRACKING_FINALIZER]
            try_update(self.store, "pods", released)

    def _release_all(self) -> None:
        for pod in self.pods:
            if is_terminal(pod) or is_terminating(pod):
                self._release(pod)

    def _create_missing(self) -> None:
        slots = self._parallelism() - len(self._occupying())
        if slots <= 0:
            return
        if self.indexed:
            for index in self._pending_indexes()[:slots]:
                self._create_pod(index)
            return
        completions = self._completions()
        succeeded = int(self.status["succeeded"])
        if completions is None:
            wanted = self._parallelism() if succeeded == 0 else 0
        else:
            wanted = min(self._parallelism(), completions - succeeded)
        for _ in range(max(0, wanted - len(self._occupying()))):
            self._create_pod(None)

    def _create_pod(self, index: int | None) -> None:
        template = self.spec.get("template") or {}
        template_meta = template.get("metadata") or {}
        job_name, job_uid = name_of(self.job), uid_of(self.job)
        labels = {
            **(template_meta.get("labels") or {}),
            JOB_NAME_LABEL: job_name,
            CONTROLLER_UID_LABEL: job_uid,
            "job-name": job_name,
            "controller-uid": job_uid,
        }
        annotations = dict(template_meta.get("annotations") or {})
        spec = copy.deepcopy(template.get("spec") or {})
        if index is not None:
            labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
            spec.setdefault("hostname", f"{job_name}-{index}")
            env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX_KEY}']"}},
            }
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                container["env"] = [*(container.get("env") or []), env]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{job_name}-{index}-" if index is not None else f"{job_name}-",
                "namespace": namespace_of(self.job),
                "labels": labels,
                "annotations": annotations,
                "finalizers": [TRACKING_FINALIZER],
                "ownerReferences": [owner_reference(self.job, "batch/v1", "Job")],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }
        try:
            created = self.store.create("pods", pod)
        except KeyError:
            return
        self.pods.append(created)

    def _write_status(self, tally: _Tally) -> None:
        active = self._active()
        self.status["active"] = len(active)
        self.status["ready"] = sum(1 for p in active if is_pod_ready(p))
        self.status["terminating"] = sum(1 for p in self.pods if is_terminating(p) and not is_terminal(p))
        if not self.status["active"]:
            self.status.pop("active")  # omitempty on the wire
        if self.status != (self.job.get("status") or {}):
            updated = writable(self.job)
            updated["status"] = self.status
            if try_update(self.store, "jobs.batch", updated) is None:
                return  # counts not saved: keep the finalizers so the pods are counted next time
        for pod in tally.counted:
            self._release(pod)
