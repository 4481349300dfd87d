"""The JobSet controller (``jobset.x-k8s.io/v1alpha2``), for multi-node training jobs.

Follows the JobSet API reference and concepts (https://jobset.sigs.k8s.io/docs/reference/jobset.v1alpha2/,
https://jobset.sigs.k8s.io/docs/concepts/):

- each ``replicatedJobs[i]`` makes ``replicas`` child batch/v1 Jobs named ``<jobset>-<rjob>-<index>``,
  labelled and annotated ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``,
  ``replicatedjob-replicas``, ``job-index``, ``job-key``, ``restart-attempt`` (also on the pod template),
  owned by the JobSet (controller ownerReference);
- a failed child Job (condition ``Failed``) triggers the ``failurePolicy``: without one the JobSet fails
  (``FailedJobs``); otherwise the first rule whose ``onJobFailureReasons`` (the Job's failure reason, e.g.
  ``PodFailurePolicy``, ``BackoffLimitExceeded``) and ``targetReplicatedJobs`` match decides:
  ``FailJobSet``, ``RestartJobSet`` (counts towards ``maxRestarts``; the JobSet fails with
  ``ReachedMaxRestarts`` once ``restartsCountTowardsMax`` reaches it) or
  ``RestartJobSetAndIgnoreMaxRestarts``; no matching rule means ``RestartJobSet``;
- a restart bumps ``status.restarts``; Jobs of an older ``restart-attempt`` are deleted with foreground
  propagation (their pods go first) and recreated under the same names (``restartStrategy: Recreate``, the
  default; ``BlockingRecreate`` behaves the same here, since a name is free only once its Job is gone);
  a Warning Event ``RestartJobSetFailurePolicyAction`` says why, and condition ``RestartingJobSet`` True
  (``FailurePolicy_<rule name>``, ``failurePolicyRule<i>`` for a rule without one as the JobSet webhook
  names it, or ``DefaultFailurePolicy`` when no rule matched) with a Warning Event of that reason, False
  (``JobsReady``) once every Job is ready again;
- a failed JobSet gets a Warning Event with its ``Failed`` reason (and ``RestartingJobSet``
  False ``JobSetFailed``, if it was restarting);
- ``spec.suspend`` is copied to every child Job (the Job controller then deletes or recreates pods);
  condition ``Suspended`` (``SuspendedJobs`` / ``ResumeJobs``);
- ``successPolicy`` (``operator`` All | Any over ``targetReplicatedJobs``, default All over every
  replicated job): condition ``Completed`` (``AllJobsCompleted``); ``status.terminalState``;
- ``status.replicatedJobsStatus`` (ready, succeeded, failed, active, suspended per replicated job).

Not emulated: ``startupPolicy``, exclusive placement, the headless Service and pod DNS, ``network``,
``coordinator``, ``managedBy``, in-place restarts, ``ttlSecondsAfterFinished``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    format_time,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    set_condition,
    try_update,
    uid_of,
    writable,
)
from sim.kube.controllers.workload_common import (
    foreground_delete,
    group_by_controller,
    record_event,
    serves,
)
from sim.kube.protocols import KubeObject, ObjectStore

RESOURCE = "jobsets.jobset.x-k8s.io"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_KEY = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
COMPONENT = "jobset-controller"

FAIL_JOBSET = "FailJobSet"
RESTARTING = "RestartingJobSet"  # the condition type (``JobSetRestarting`` in the JobSet API)
RESTART_JOBSET = "RestartJobSet"
RESTART_IGNORING_MAX = "RestartJobSetAndIgnoreMaxRestarts"
_ACTION_REASONS = {
    FAIL_JOBSET: ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action"),
    RESTART_JOBSET: ("RestartJobSetFailurePolicyAction", "applying RestartJobSet failure policy action"),
    RESTART_IGNORING_MAX: (
        "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
    ),
}


def _is_true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def job_failure_reason(job: Mapping[str, Any]) -> str:
    """The reason of a Job's ``Failed`` condition (``PodFailurePolicy``, ``BackoffLimitExceeded``...)."""
    found = condition(job, "Failed")
    return str(found.get("reason") or "") if found else ""


def _with_first_failed(message: str, job_name: str) -> str:
    return f"{message} (first failed job: {job_name})"


class JobSetController:
    """Keeps each JobSet's child Jobs, restarts and status as the JobSet controller does."""

    name = "jobset"

    def reconcile(self, store: ObjectStore) -> None:
        """Reconcile every JobSet against its child Jobs."""
        if not serves(store, RESOURCE):
            return
        cache = cache_for(store)
        jobsets = cache.list(RESOURCE)
        if not jobsets:
            return
        jobs_by_owner = group_by_controller(cache.list("jobs.batch"), "JobSet")
        for jobset in jobsets:
            if not is_terminating(jobset):
                _JobSetSync(store, jobset, jobs_by_owner.get(uid_of(jobset), [])).run()


class _JobSetSync:
    """One reconcile of one JobSet."""

    def __init__(self, store: ObjectStore, jobset: KubeObject, jobs: list[KubeObject]) -> None:
        self.store = store
        self.jobset = jobset
        self.spec: Mapping[str, Any] = jobset.get("spec") or {}
        self.status: dict[str, Any] = copy.deepcopy(jobset.get("status") or {})
        self.status.setdefault("restarts", 0)
        self.now = format_time(store)
        attempt = str(self.status["restarts"])
        self.current = [j for j in jobs if labels_of(j).get(RESTART_ATTEMPT_KEY) == attempt]
        self.stale = [j for j in jobs if labels_of(j).get(RESTART_ATTEMPT_KEY) != attempt]
        self.ended: list[KubeObject] = []
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message), sent with the status

    def run(self) -> None:
        for job in self.stale:
            foreground_delete(self.store, "jobs.batch", job)
        restart: tuple[str, KubeObject] | None = None
        if not self.status.get("terminalState"):
            self._sync_suspend()
            if not self.spec.get("suspend") and self._all_jobs_ready():
                self._set_restarting("False", "JobsReady", "all jobs are ready", "Normal")
            restart = self._apply_failure_policy()
            if restart is None and not self._failed_now() and not self._check_success():
                self._create_missing()
        # A restart acts only once its new count is stored: should the status write lose a race (another
        # client wrote the JobSet), the next pass sees the same failed Job and decides again. The Events of
        # the conditions changed go out only then too, as the real manager sends them.
        if self._write_status():
            for event_type, reason, message in self.events:
                record_event(self.store, self.jobset, event_type, reason, message, component=COMPONENT)
            if restart is not None:
                self._restart(*restart)

    def _all_jobs_ready(self) -> bool:
        """Every replica's Job ready or succeeded (the real manager's ``allJobsReady``)."""
        total = sum(int(r.get("replicas", 1)) for r in self._replicated_jobs())
        done = sum(int(s["ready"]) + int(s["succeeded"]) for s in self._replicated_jobs_status())
        return total == done

    def _set_restarting(self, status: str, reason: str, message: str, event_type: str) -> None:
        """The ``RestartingJobSet`` condition, with an Event when it changes; a False one only updates an
        existing condition (as the real manager's ``updateCondition``)."""
        found = next((c for c in self.status.get("conditions") or [] if c.get("type") == RESTARTING), None)
        if found is None and status != "True":
            return
        if found is not None and (found.get("status"), found.get("reason"), found.get("message")) == (
            status,
            reason,
            message,
        ):
            return
        new = {"type": RESTARTING, "status": status, "reason": reason, "message": message}
        set_condition(self.status, new, self.now)
        self.events.append((event_type, reason, message))

    # --- failure policy ----------------------------------------------------------------------------

    def _failed_now(self) -> bool:
        return self.status.get("terminalState") == "Failed"

    def _apply_failure_policy(self) -> tuple[str, KubeObject] | None:
        """On a failed child Job, fail the JobSet or count a restart; the restart to carry out, if any."""
        failed = sorted(
            (j for j in self.current if _is_true(j, "Failed") and not is_terminating(j)),
            key=lambda j: str(meta(j).get("creationTimestamp") or ""),
        )
        if not failed:
            return None
        first = failed[0]
        policy = self.spec.get("failurePolicy")
        if policy is None:
            self._fail(
                "FailedJobs",
                _with_first_failed("jobset failed due to one or more job failures", name_of(first)),
            )
            return None
        action, rule = self._matching_action(policy, first)
        if action == FAIL_JOBSET:
            reason, message = _ACTION_REASONS[FAIL_JOBSET]
            self._fail(reason, _with_first_failed(message, name_of(first)))
        elif action == RESTART_JOBSET and int(self.status.get("restartsCountTowardsMax") or 0) >= int(
            policy.get("maxRestarts") or 0
        ):
            message = "jobset failed due to reaching max number of restarts"
            self._fail("ReachedMaxRestarts", _with_first_failed(message, name_of(first)))
        else:
            self._count_restart(action)
            _, message = _ACTION_REASONS.get(action, _ACTION_REASONS[RESTART_JOBSET])
            reason = f"FailurePolicy_{rule}" if rule is not None else "DefaultFailurePolicy"
            self._set_restarting("True", reason, _with_first_failed(message, name_of(first)), "Warning")
            return action, first
        return None

    @staticmethod
    def _matching_action(policy: Mapping[str, Any], job: Mapping[str, Any]) -> tuple[str, str | None]:
        """The action of the first matching rule and the rule's name (``failurePolicyRule<i>`` when it has
        none, as the JobSet webhook names it); ``RestartJobSet`` and None when no rule matches."""
        reason = job_failure_reason(job)
        replicated_job = labels_of(job).get(REPLICATED_JOB_NAME_KEY)
        for index, rule in enumerate(policy.get("rules") or []):
            reasons = rule.get("onJobFailureReasons") or []
            targets = rule.get("targetReplicatedJobs") or []
            if (not reasons or reason in reasons) and (not targets or replicated_job in targets):
                return str(rule.get("action")), str(rule.get("name") or f"failurePolicyRule{index}")
        return RESTART_JOBSET, None

    def _count_restart(self, action: str) -> None:
        self.status["restarts"] = int(self.status["restarts"]) + 1
        if action != RESTART_IGNORING_MAX:
            self.status["restartsCountTowardsMax"] = int(self.status.get("restartsCountTowardsMax") or 0) + 1
        # The Jobs of the attempt that just ended no longer count in the status.
        self.ended, self.current = self.current, []

    def _restart(self, action: str, failed_job: Mapping[str, Any]) -> None:
        reason, message = _ACTION_REASONS.get(action, _ACTION_REASONS[RESTART_JOBSET])
        record_event(
            self.store,
            self.jobset,
            "Warning",
            reason,
            _with_first_failed(message, name_of(failed_job)),
            component=COMPONENT,
        )
        # Every Job of the attempt that just ended is now stale: delete them all, recreate once gone.
        for job in self.ended:
            foreground_delete(self.store, "jobs.batch", job)

    def _fail(self, reason: str, message: str) -> None:
        self.status["terminalState"] = "Failed"
        set_condition(
            self.status, {"type": "Failed", "status": "True", "reason": reason, "message": message}, self.now
        )
        self.events.append(("Warning", reason, message))
        self._set_restarting("False", "JobSetFailed", "jobset failed", "Normal")

    # --- success and suspend -----------------------------------------------------------------------

    def _check_success(self) -> bool:
        policy = self.spec.get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or [r.get("name") for r in self._replicated_jobs()]
        relevant = [j for j in self.current if labels_of(j).get(REPLICATED_JOB_NAME_KEY) in targets]
        done = [j for j in relevant if _is_true(j, "Complete")]
        expected = sum(int(r.get("replicas", 1)) for r in self._replicated_jobs() if r.get("name") in targets)
        met = bool(done) if policy.get("operator") == "Any" else expected > 0 and len(done) >= expected
        if met:
            self.status["terminalState"] = "Completed"
            set_condition(
                self.status,
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "AllJobsCompleted",
                    "message": "jobset completed successfully",
                },
                self.now,
            )
        return met

    def _sync_suspend(self) -> None:
        suspend = bool(self.spec.get("suspend"))
        for job in self.current:
            if bool((job.get("spec") or {}).get("suspend")) != suspend:
                updated = writable(job)
                updated["spec"]["suspend"] = suspend
                try_update(self.store, "jobs.batch", updated)
        was_suspended = _is_true(self.jobset, "Suspended")
        if suspend:
            new = {"type": "Suspended", "status": "True", "reason": "SuspendedJobs"}
            set_condition(self.status, {**new, "message": "jobset is suspended"}, self.now)
        elif was_suspended:
            new = {"type": "Suspended", "status": "False", "reason": "ResumeJobs"}
            set_condition(self.status, {**new, "message": "jobset is resumed"}, self.now)

    # --- child jobs --------------------------------------------------------------------------------

    def _replicated_jobs(self) -> list[Mapping[str, Any]]:
        return list(self.spec.get("replicatedJobs") or [])

    def _create_missing(self) -> None:
        existing = {name_of(j) for j in self.current}
        for replicated in self._replicated_jobs():
            for index in range(int(replicated.get("replicas", 1))):
                name = f"{name_of(self.jobset)}-{replicated.get('name')}-{index}"
                if name not in existing:
                    self._create_job(replicated, index, name)

    def _child_labels(self, replicated: Mapping[str, Any], index: int, job_name: str) -> dict[str, str]:
        job_key = hashlib.sha1(
            f"{namespace_of(self.jobset)}/{job_name}".encode(), usedforsecurity=False
        ).hexdigest()
        return {
            JOBSET_NAME_KEY: name_of(self.jobset),
            REPLICATED_JOB_NAME_KEY: str(replicated.get("name")),
            REPLICATED_JOB_REPLICAS_KEY: str(replicated.get("replicas", 1)),
            JOB_INDEX_KEY: str(index),
            JOB_KEY: job_key,
            RESTART_ATTEMPT_KEY: str(self.status["restarts"]),
            JOBSET_UID_KEY: uid_of(self.jobset),
        }

    def _create_job(self, replicated: Mapping[str, Any], index: int, name: str) -> None:
        template = copy.deepcopy(replicated.get("template") or {})
        job_meta = template.get("metadata") or {}
        child = self._child_labels(replicated, index, name)
        spec = template.get("spec") or {}
        spec["suspend"] = bool(self.spec.get("suspend"))
        pod_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **child}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **child}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": namespace_of(self.jobset),
                "labels": {**(job_meta.get("labels") or {}), **child},
                "annotations": {**(job_meta.get("annotations") or {}), **child},
                "ownerReferences": [owner_reference(self.jobset, API_VERSION, "JobSet")],
            },
            "spec": spec,
        }
        try:
            self.current.append(self.store.create("jobs.batch", job))
        except KeyError:
            return  # the previous attempt's Job of that name is still being deleted

    # --- status ------------------------------------------------------------------------------------

    def _replicated_jobs_status(self) -> list[dict[str, Any]]:
        statuses = []
        for replicated in self._replicated_jobs():
            jobs = [
                j for j in self.current if labels_of(j).get(REPLICATED_JOB_NAME_KEY) == replicated["name"]
            ]
            active = [j for j in jobs if not _is_true(j, "Complete") and not _is_true(j, "Failed")]
            statuses.append(
                {
                    "name": replicated["name"],
                    "ready": sum(1 for j in active if int((j.get("status") or {}).get("ready") or 0) > 0),
                    "succeeded": sum(1 for j in jobs if _is_true(j, "Complete")),
                    "failed": sum(1 for j in jobs if _is_true(j, "Failed")),
                    "active": sum(1 for j in active if int((j.get("status") or {}).get("active") or 0) > 0),
                    "suspended": sum(1 for j in jobs if (j.get("spec") or {}).get("suspend")),
                }
            )
        return statuses

    def _write_status(self) -> bool:
        """Store the status; False when the write lost a race."""
        self.status["replicatedJobsStatus"] = self._replicated_jobs_status()
        if self.status == (self.jobset.get("status") or {}):
            return True
        updated = writable(self.jobset)
        updated["status"] = self.status
        return try_update(self.store, RESOURCE, updated) is not None
