"""The agent's drain of its own Nomad node, on a background thread: drain, requeue, wait for the outcome.

1. Record the incident in the node's metadata (``gpuhealth.drained``) so no agent, restarted or not,
   drains it twice; claim the ineligibility (``gpuhealth.ineligible_by``) when the node was eligible.
2. Note the batch jobs that run on the node, then ``POST /v1/node/:id/drain`` with the deadline,
   ``IgnoreSystemJobs: true`` (the agent is a system job and must survive its own drain) and ``Meta``
   naming the incident.
3. Requeue those batch jobs (``remediation/nomad/requeue.py``) unless ``gpuhealth.requeued`` already
   names the incident, then record it there; a job restarted for another node's fault within the
   same-fault window is not restarted again (only its allocations on this node move).
4. Wait until Nomad reports the drain complete (``DrainStrategy`` cleared) or the deadline has passed.

The loop reads the news with :meth:`NomadDrainRunner.updates` (each once): the requeue, then the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from core.aggregator_api import DrainPhase
from remediation.executor.background_drain import BackgroundDrain, DrainState, DrainUpdate
from remediation.nomad.errors import NomadError
from remediation.nomad.node_view import (
    DRAIN_META_INCIDENT,
    DRAINED,
    INELIGIBLE_BY,
    OWNER,
    REQUEUED,
    is_draining,
    is_ineligible,
    meta_of,
)
from remediation.nomad.requeue import (
    DEFAULT_SAME_FAULT_WINDOW_S,
    JobRef,
    NomadRequeuer,
    RequeueQueries,
    batch_jobs_on,
)

log = structlog.get_logger(__name__)

JsonObject = dict[str, Any]
DRAIN_GRACE_S = 5.0  # after the deadline Nomad stops what is left; give it that long to say so


class DrainQueries(RequeueQueries, Protocol):
    """What the drain needs from ``NomadApi``."""

    def get_node(self, node_id: str) -> JsonObject: ...

    def node_allocations(self, node_id: str) -> list[JsonObject]: ...

    def drain(
        self, node_id: str, *, deadline_s: float, ignore_system_jobs: bool, meta: Mapping[str, str]
    ) -> None: ...


# Nomad's phases: COMPLETE when Nomad finished the drain, INCOMPLETE when the deadline passed with it still
# in progress (or it was cancelled), FAILED when it could not be started. The phases, the timeline's updates
# and the state are the same for every orchestrator.
__all__ = ["DrainPhase", "NomadDrainRunner", "NomadDrainSetup", "NomadDrainState", "NomadDrainUpdate"]
NomadDrainUpdate = DrainUpdate
NomadDrainState = DrainState


@dataclass(frozen=True)
class NomadDrainSetup:
    """What the executor needs to drain its node."""

    namespace: str | None = None  # requeue only jobs of this namespace; None: every namespace
    poll_interval_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    same_fault_window_s: float = DEFAULT_SAME_FAULT_WINDOW_S  # a job restarted this recently is not again
    wall_clock_ns: Callable[[], int] = time.time_ns


MetaWriter = Callable[[Mapping[str, str | None]], None]
Retried = Callable[[Callable[[], Any], str], Any]


class NomadDrainRunner(BackgroundDrain[DrainState]):
    """Drains one node in the background, one incident at a time, each incident at most once."""

    known_errors = (NomadError,)

    def __init__(
        self,
        api: DrainQueries,
        node_id: str,
        setup: NomadDrainSetup,
        *,
        write_meta: MetaWriter,
        retried: Retried,
    ) -> None:
        super().__init__(log.bind(node_id=node_id), f"gpuhealth-nomad-drain:{node_id[:8]}")
        self.node_id = node_id
        self._api = api
        self._setup = setup
        self._write_meta = write_meta  # the executor's metadata write (retried, kept in its view)
        self._retried = retried
        self._requeuer = NomadRequeuer(
            api, retried, same_fault_window_s=setup.same_fault_window_s, wall_clock_ns=setup.wall_clock_ns
        )

    def _new_state(self, incident_id: str) -> DrainState:
        return DrainState(incident_id)

    def _describe(self, error: Exception) -> str:
        return error.describe() if isinstance(error, NomadError) else str(error)

    # --- the background thread -----------------------------------------------------------------------------

    def _drain_node(self, incident_id: str, deadline_s: float) -> None:
        node = self._retried(lambda: self._api.get_node(self.node_id), "read node")
        claim: dict[str, str | None] = {DRAINED: incident_id}
        if not is_ineligible(node):
            claim[INELIGIBLE_BY] = OWNER  # the drain makes it ineligible: that is ours to undo
        self._write_meta(claim)
        allocations = self._retried(lambda: self._api.node_allocations(self.node_id), "list allocations")
        jobs = batch_jobs_on(allocations, self._setup.namespace)
        started = self._setup.monotonic()
        meta = {DRAIN_META_INCIDENT: incident_id, "message": f"gpuhealth: GPU fault, incident {incident_id}"}
        self._retried(
            lambda: self._api.drain(self.node_id, deadline_s=deadline_s, ignore_system_jobs=True, meta=meta),
            "drain",
        )
        self._log.info("drain_started", incident=incident_id, deadline_s=deadline_s, batch_jobs=len(jobs))
        if meta_of(node).get(REQUEUED) != incident_id:
            self._requeue(jobs, incident_id)
        phase, verdict = self._await_drain(started, deadline_s)
        seconds = self._setup.monotonic() - started
        self._finish(incident_id, phase, f"{verdict} in {seconds:.1f} s (system jobs left running)")

    def _requeue(self, jobs: list[JobRef], incident_id: str) -> None:
        report = self._requeuer.requeue(jobs, incident_id=incident_id, node=self.node_id)
        if not report.failed:
            try:
                self._write_meta({REQUEUED: incident_id})
            except NomadError as error:  # the jobs restarted; only a restarted agent could repeat it
                self._log.warning("requeue_not_recorded", incident=incident_id, error=error.describe())
        self._record(DrainUpdate(incident_id, ok=not report.failed, detail=report.summary(), requeue=True))

    def _await_drain(self, started: float, deadline_s: float) -> tuple[DrainPhase, str]:
        """How the drain ended: Nomad completed it, someone (our release) cancelled it, or time ran out."""
        setup = self._setup
        while setup.monotonic() - started <= deadline_s + DRAIN_GRACE_S:
            try:
                node = self._api.get_node(self.node_id)
            except NomadError as error:
                self._log.warning("drain_progress_unreadable", error=error.describe())
            else:
                if not is_draining(node):
                    last = node.get("LastDrain") or {}
                    if last.get("Status") == "canceled":
                        return DrainPhase.INCOMPLETE, "drain cancelled"
                    return DrainPhase.COMPLETE, "drain complete"
            setup.sleep(setup.poll_interval_s)
        return DrainPhase.INCOMPLETE, "drain incomplete at the deadline"
