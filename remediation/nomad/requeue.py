"""Requeue of the batch jobs that ran on a drained Nomad node: stop every allocation of each job, once.

A drain migrates service allocations, but a batch allocation is only stopped when the drain's deadline
passes, and system jobs never move (docs/nomad.md, "What the agent does to its node"). A distributed
training job whose member died with the node must restart as a whole, so for every batch job that had an
allocation on the node we stop all of its live allocations; the scheduler places them again on eligible
(healthy) nodes.
The caller records the incident in the node's metadata afterwards, so a restarted agent never requeues
the same incident twice.

Same-fault window (``requeue.same_fault_window_s``, as on Kubernetes): incidents are per node, so two nodes
of one job failing together are two incidents, and the job must still restart once. The marker is the
job's own replacement chain, which the servers keep and answer at once: when every live allocation of
the job replaced (``NextAllocation``) an allocation that was stopped for migration (``DesiredStatus:
stop``, ``DesiredTransition.Migrate``, what ``/v1/allocation/:id/stop`` and drains do) and was created
at most the window ago, the job was just restarted as a whole. It is not restarted again: only its
allocations that landed on this node before we knew it was bad are stopped, so they move elsewhere.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from remediation.nomad.errors import NomadError, NomadNotFound

log = structlog.get_logger(__name__)

JsonObject = dict[str, Any]
LIVE_CLIENT_STATUSES = frozenset({"pending", "running"})
BATCH = "batch"
NANOSECONDS = 1_000_000_000
DEFAULT_SAME_FAULT_WINDOW_S = 600.0


class RequeueQueries(Protocol):
    """What the requeue needs from ``NomadApi``."""

    def get_job(self, job_id: str, namespace: str | None) -> JsonObject: ...

    def job_allocations(self, job_id: str, namespace: str | None) -> list[JsonObject]: ...

    def stop_allocation(self, allocation_id: str) -> None: ...


@dataclass(frozen=True, order=True)
class JobRef:
    """A job by namespace and id."""

    namespace: str
    job_id: str

    def describe(self) -> str:
        return f"{self.namespace}/{self.job_id}"


@dataclass(frozen=True)
class JobRequeue:
    """What happened to one job."""

    job: JobRef
    stopped: int
    error: str | None = None
    restarted_ago_s: float | None = None  # set when a restart within the same-fault window stood for ours

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.job.describe()}: failed ({self.error})"
        if self.restarted_ago_s is not None:
            return (
                f"{self.job.describe()}: already restarted {self.restarted_ago_s:.0f} s ago (same-fault "
                f"window), not again; {self.stopped} allocations moved off this node"
            )
        return f"{self.job.describe()}: requeued ({self.stopped} allocations stopped)"


@dataclass
class NomadRequeueReport:
    """The requeue of one incident."""

    jobs: list[JobRequeue] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(job.error is not None for job in self.jobs)

    def summary(self) -> str:
        parts = [job.describe() for job in self.jobs]
        return "requeue: " + ("; ".join(parts) if parts else "no batch job to requeue")


def is_live(allocation: Mapping[str, Any]) -> bool:
    """An allocation that runs or is about to (not stopped, not finished)."""
    return (
        allocation.get("DesiredStatus", "run") == "run"
        and allocation.get("ClientStatus") in LIVE_CLIENT_STATUSES
    )


def job_type_of(allocation: Mapping[str, Any]) -> str | None:
    """The allocation's job type: ``JobType`` on list stubs, ``Job.Type`` on full allocations."""
    job_type = allocation.get("JobType")
    if job_type is None and isinstance(allocation.get("Job"), Mapping):
        job_type = allocation["Job"].get("Type")
    return str(job_type) if job_type is not None else None


def restarted_within(allocations: Sequence[Mapping[str, Any]], now_ns: int, window_s: float) -> float | None:
    """Seconds since the job (``allocations``: all of it) was restarted as a whole, when at most
    ``window_s`` ago: every live allocation replaces one stopped for migration and is that recent. None
    otherwise, and when nothing is live or a time is missing (the restart then goes ahead)."""
    live = [alloc for alloc in allocations if is_live(alloc)]
    if window_s <= 0 or not live:
        return None
    replaced = {
        str(alloc["NextAllocation"]): alloc
        for alloc in allocations
        if alloc.get("NextAllocation") and _stopped_for_migration(alloc)
    }
    ages: list[float] = []
    for alloc in live:
        created = alloc.get("CreateTime")
        if str(alloc.get("ID")) not in replaced or not isinstance(created, int):
            return None
        age = (now_ns - created) / NANOSECONDS
        if not 0 <= age <= window_s:
            return None
        ages.append(age)
    return max(ages)


def _stopped_for_migration(alloc: Mapping[str, Any]) -> bool:
    """Stopped by ``/v1/allocation/:id/stop`` or a drain (not by a job update or a failure)."""
    transition = alloc.get("DesiredTransition")
    migrate = transition.get("Migrate") if isinstance(transition, Mapping) else None
    return alloc.get("DesiredStatus") == "stop" and migrate is True


def batch_jobs_on(allocations: Sequence[Mapping[str, Any]], namespace: str | None) -> list[JobRef]:
    """The batch jobs with a live allocation among ``allocations`` (the node's), in ``namespace`` if set."""
    jobs = {
        JobRef(str(alloc.get("Namespace") or "default"), str(alloc["JobID"]))
        for alloc in allocations
        if is_live(alloc) and job_type_of(alloc) == BATCH and alloc.get("JobID")
    }
    return sorted(job for job in jobs if namespace is None or job.namespace == namespace)


class NomadRequeuer:
    """Stops every live allocation of each given batch job; one retried call per request."""

    def __init__(
        self,
        api: RequeueQueries,
        call: Callable[[Callable[[], Any], str], Any],
        *,
        same_fault_window_s: float = DEFAULT_SAME_FAULT_WINDOW_S,
        wall_clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._api = api
        self._call = call  # runs one request with the executor's retries; raises NomadError when it fails
        self._window_s = same_fault_window_s
        self._wall_clock_ns = wall_clock_ns  # compared with the servers' CreateTime (nanoseconds, UTC)

    def requeue(self, jobs: Sequence[JobRef], *, incident_id: str, node: str) -> NomadRequeueReport:
        """Restart each job (``node``: the drained node's ID, whose allocations always move)."""
        report = NomadRequeueReport()
        for job in jobs:
            report.jobs.append(self._requeue_job(job, node))
        log.info("requeue_done", node=node, incident=incident_id, summary=report.summary())
        return report

    def _requeue_job(self, job: JobRef, node: str) -> JobRequeue:
        try:
            allocations = self._call(lambda: self._api.job_allocations(job.job_id, job.namespace), "list")
            live = [alloc for alloc in allocations if is_live(alloc)]
            ago = restarted_within(allocations, self._wall_clock_ns(), self._window_s)
            if ago is not None:
                live = [alloc for alloc in live if alloc.get("NodeID") == node]
            for alloc in live:
                self._stop(str(alloc["ID"]))
        except NomadError as error:
            return JobRequeue(job, 0, error.describe())
        return JobRequeue(job, len(live), restarted_ago_s=ago)

    def _stop(self, allocation_id: str) -> None:
        # An allocation gone since we listed it (garbage-collected) has nothing left to stop.
        with contextlib.suppress(NomadNotFound):
            self._call(lambda: self._api.stop_allocation(allocation_id), "stop")
