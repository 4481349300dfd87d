"""``NomadExecutor``: applies plan steps to one Nomad node (metadata, eligibility, drain) and watches it.

How the steps map (docs/nomad.md, "How the executor maps each action"):

* ``SetStateLabel`` / ``SetIncidentAnnotation`` / ``SetUnhealthyGpus`` -> dynamic node metadata
  ``gpuhealth.state`` / ``gpuhealth.incident`` / ``gpuhealth.unhealthy_gpus``; ``SetCondition`` has no
  Nomad equivalent and is kept in ``gpuhealth.condition``/``reason``/``message`` so the planner sees it done.
  Consecutive metadata steps go out as one ``POST /v1/client/metadata``.
* ``SetTaint`` / ``Cordon`` -> eligibility ``ineligible``, with ``gpuhealth.quarantine`` /
  ``gpuhealth.cordoned`` and, when the node was eligible, ``gpuhealth.ineligible_by=gpuhealth`` written
  first: ``RemoveTaint`` / ``Uncordon`` make the node eligible again only when that says we did it, and
  only once neither our quarantine nor our cordon holds; they also cancel a drain of ours still running.
  When the incident closes (``SetIncidentAnnotation(None)``) an ineligibility still marked ours goes too:
  the drain's, with ``policy.taint`` off, which no ``RemoveTaint`` would lift. A human's never does.
* ``EmitEvent`` -> Nomad has no custom node events: logged, nothing written.
* ``Drain`` -> a background drain and requeue (``remediation/nomad/drain.py``).

Steps never raise: a step that fails comes back ``ok=False`` and the loop applies it again next pass.
A 403 (a token without ``node:write``) is logged once, reported in the step results, and holds every write
for ``forbidden_hold_s``: no retry storm, no crash loop. Facts come from the node watch plus the writes
this executor made that the watch has not shown yet (dynamic metadata reaches the servers within seconds).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import structlog

from core.steps import (
    ApplyReport,
    Cordon,
    Drain,
    EmitEvent,
    NodeFacts,
    RemoveTaint,
    SetCondition,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    SetUnhealthyGpus,
    Step,
    StepResult,
    Uncordon,
)
from remediation.executor.common import ExecutorCommon
from remediation.executor.forbidden_hold import ForbiddenHold
from remediation.executor.step_apply import dry_run_report, log_applied, operation_or_answer, skip_reason
from remediation.nomad.drain import DrainQueries, NomadDrainRunner, NomadDrainSetup, NomadDrainState
from remediation.nomad.errors import NomadError, NomadForbidden, NomadNotFound, NomadUnavailable
from remediation.nomad.idle import gpu_allocations
from remediation.nomad.node_view import (
    CONDITION,
    CORDONED,
    DRAINED,
    ELIGIBLE,
    INCIDENT,
    INELIGIBLE,
    INELIGIBLE_BY,
    MESSAGE,
    OWNER,
    QUARANTINE,
    REASON,
    REQUEUED,
    STATE,
    UNHEALTHY_GPUS,
    is_draining,
    node_facts,
    quarantine_value,
)
from remediation.nomad.node_watch import NomadNodeWatch
from remediation.nomad.retry import NomadRetry
from remediation.nomad.settings import NomadRetrySettings

log = structlog.get_logger(__name__)

JsonObject = dict[str, Any]
MetaChanges = dict[str, str | None]
PENDING_TTL_S = 30.0  # how long our own write overrides a watch that has not shown it yet
META_STEPS = (SetCondition, SetStateLabel, SetIncidentAnnotation, SetUnhealthyGpus)


class NomadNodeApi(DrainQueries, Protocol):
    """What the executor needs from ``remediation.nomad.api.NomadApi`` (tests may wrap it)."""

    writes_total: int
    requests_total: int

    def watch_node(self, node_id: str, index: int, wait_s: float) -> tuple[JsonObject, int]: ...

    def set_eligibility(self, node_id: str, *, eligible: bool) -> int: ...

    def cancel_drain(self, node_id: str) -> None: ...

    def write_metadata(self, node_id: str | None, changes: Mapping[str, str | None]) -> dict[str, str]: ...

    def close(self) -> None: ...


class NomadExecutor(ExecutorCommon[NomadDrainState]):
    """The ``NodeExecutor`` (and ``DrainingExecutor``) for one Nomad client node."""

    gpu_workload = "allocation"  # what :meth:`gpu_pods` lists, for the diagnostics' "busy" message

    def __init__(
        self,
        api: NomadNodeApi,
        node_id: str,
        *,
        node_name: str | None = None,
        retry: NomadRetrySettings | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        watch: bool = True,
        watch_wait_s: float = 60.0,
        forbidden_hold_s: float = 300.0,
        drain: NomadDrainSetup | None = None,
    ) -> None:
        self.node_id = node_id
        self.node_name = node_name or node_id
        self._api: NomadNodeApi = api
        self._retry = NomadRetry(retry or NomadRetrySettings(), sleep=sleep, monotonic=monotonic)
        self._monotonic = monotonic
        # Our pending writes age against the watch, which runs on real time whatever clock the retries use.
        self._watch_clock = time.monotonic
        self._hold = ForbiddenHold(forbidden_hold_s, monotonic)
        self._lock = threading.RLock()
        # Our writes the watch has not shown yet: the value and when it was written; for eligibility also
        # the node's ModifyIndex the write produced.
        self._pending_meta: dict[str, tuple[str | None, float]] = {}
        self._pending_eligibility: tuple[bool, float, int] | None = None
        self._closed = threading.Event()
        self._log = log.bind(node=self.node_name, node_id=node_id)
        self._watch: NomadNodeWatch = NomadNodeWatch(
            api, node_id, wait_s=watch_wait_s, explain=self._with_pending
        )
        self._watching = watch
        self._drain: NomadDrainRunner | None = (
            NomadDrainRunner(api, node_id, drain, write_meta=self._write_meta, retried=self._retried)
            if drain is not None
            else None
        )
        if watch:
            self._watch.start()

    # --- NodeExecutor ---------------------------------------------------------------------------------------

    def facts(self) -> NodeFacts:
        """The node's facts from the watch (read directly until it answered once), with our recent writes."""
        facts = node_facts(self._view())
        state = self.drain_state
        if state is not None and facts.exists:
            facts = dataclasses.replace(facts, drained_incident=state.incident_id)
        return facts

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        """Apply ``steps`` in order; each gives a ``StepResult`` (never an exception for API errors)."""
        if dry_run:
            return dry_run_report(steps, self._log)
        report = ApplyReport()
        batch: list[Step] = []
        with self._watch.own_writes():
            for step in steps:
                if isinstance(step, META_STEPS):
                    batch.append(step)
                    continue
                report.results.extend(self._apply_batch(batch, unavailable=_unavailable(report)))
                batch = []
                report.results.append(self._apply_one(step, unavailable=_unavailable(report)))
            report.results.extend(self._apply_batch(batch, unavailable=_unavailable(report)))
            # What the watch will show once our writes arrive: the node as it was, with them applied.
            self._watch.expect(node_facts(self._view()))
        return report

    def close(self) -> None:
        """Stop the watch and close the connections (the API first: that cuts the watch's long poll)."""
        self._closed.set()
        self._api.close()
        if self._watching:
            self._watch.close()

    # --- extras for the agent loop, the wiring and the benchmarks ----------------------------------------

    def gpu_pods(self) -> list[str]:
        """Live allocations on the node that hold GPUs (``agent.diagnostics.runner.IdleProbe``; one list, read
        only when a deep diagnostic is due). Raises NomadError when they cannot be listed."""
        allocations = self._retried(lambda: self._api.node_allocations(self.node_id), "list allocations")
        return gpu_allocations(allocations)

    # --- steps --------------------------------------------------------------------------------------------

    def _apply_batch(self, batch: Sequence[Step], *, unavailable: str | None = None) -> list[StepResult]:
        """Consecutive metadata steps as one write; every step shares the outcome."""
        if not batch:
            return []
        changes: MetaChanges = {}
        for step in batch:
            changes.update(_meta_changes(step))
        names = "+".join(type(step).__name__ for step in batch)
        closing = INCIDENT in changes and changes[INCIDENT] is None
        write = self._close_incident if closing else self._write_changed
        operation = functools.partial(write, changes)
        ok, detail, attempts = self._run(operation, names, unavailable=unavailable)
        return [StepResult(step=step, ok=ok, detail=detail, attempts=attempts) for step in batch]

    def _apply_one(self, step: Step, *, unavailable: str | None) -> StepResult:
        if isinstance(step, EmitEvent):
            # Nomad has no custom node events: the log line is the record (the aggregator has the timeline).
            self._log.info("node_event", reason=step.reason, message=step.message, key=step.key)
            return StepResult(step=step, ok=True, detail="logged (Nomad has no node events)", attempts=0)
        operation = operation_or_answer(step, self._operation, can_drain=self._drain is not None)
        if isinstance(operation, StepResult):
            return operation
        ok, detail, attempts = self._run(operation, type(step).__name__, unavailable=unavailable)
        return StepResult(step=step, ok=ok, detail=detail, attempts=attempts)

    def _operation(self, step: Step) -> Callable[[], str] | None:
        match step:
            case SetTaint(value=value, effect=effect):
                return lambda: self._make_ineligible(
                    {QUARANTINE: quarantine_value(value, effect)}, "quarantined"
                )
            case Cordon():
                return lambda: self._make_ineligible({CORDONED: "true"}, "cordoned")
            case RemoveTaint():
                return lambda: self._lift(QUARANTINE, still_held_by=CORDONED, done="quarantine lifted")
            case Uncordon():
                return lambda: self._lift(CORDONED, still_held_by=QUARANTINE, done="uncordoned")
            case Drain(incident_id=incident_id, deadline_s=deadline_s):
                runner = self._drain
                assert runner is not None  # _apply_one answers for an executor without one
                return lambda: runner.start(incident_id, deadline_s)
            case _:
                return None

    def _run(
        self, operation: Callable[[], str], name: str, *, unavailable: str | None
    ) -> tuple[bool, str, int]:
        """(ok, detail, attempts) of one operation under the retries, the 403 hold and the pass's outage."""
        skipped = skip_reason(self._hold, unavailable)
        if skipped is not None:
            return False, skipped, 0
        outcome = self._retry.call(operation, step=name)
        if outcome.error is not None:
            return False, self._failed(outcome.error, name), outcome.attempts
        self._recovered()
        detail = outcome.value or "done"
        log_applied(self._log, name, detail, outcome.attempts, wrote=detail != "unchanged")
        return True, detail, outcome.attempts

    def _make_ineligible(self, marker: MetaChanges, done: str) -> str:
        node = self._fresh_node()
        claim: MetaChanges = dict(marker)
        eligible = node.get("SchedulingEligibility") != INELIGIBLE
        if eligible and INELIGIBLE_BY not in self._meta(node):
            claim[INELIGIBLE_BY] = OWNER  # recorded before acting: a crash in between still releases it
        self._write_changed(claim, node)
        if eligible:
            written = self._api.set_eligibility(self.node_id, eligible=False)
            self._remember_eligibility(eligible=False, index=written)
            return f"{done}: node ineligible"
        return f"{done}: node was already ineligible"

    def _lift(self, key: str, *, still_held_by: str, done: str) -> str:
        node = self._fresh_node()
        meta = self._meta(node)
        if key not in meta:
            return f"{done}: nothing of ours to lift"
        ours = meta.get(INELIGIBLE_BY) == OWNER
        if is_draining(node) and DRAINED in meta:
            self._api.cancel_drain(self.node_id)  # our drain, still running: it ends with the incident
        if ours and still_held_by not in meta and node.get("SchedulingEligibility") == INELIGIBLE:
            # Eligibility first, then the markers: a failure in between leaves ownership recorded.
            written = self._api.set_eligibility(self.node_id, eligible=True)
            self._remember_eligibility(eligible=True, index=written)
        changes: MetaChanges = {key: None}
        if ours and still_held_by not in meta:
            changes[INELIGIBLE_BY] = None
        self._write_changed(changes, node)
        if ours:
            return f"{done}: node eligible again" if still_held_by not in meta else done
        return f"{done}: the ineligibility is someone else's, left as it is"

    def _close_incident(self, changes: MetaChanges) -> str:
        """The incident's markers go; an ineligibility that is still ours and no longer held by our
        quarantine or cordon goes with them. That is the drain's (``policy.taint`` off, drain on): no
        RemoveTaint or Uncordon step would lift it. Eligibility first, then the markers, so a failure in
        between leaves the incident recorded and the next pass plans this again."""
        node = self._fresh_node()
        meta = self._meta(node)
        changes = dict(changes)
        released = False
        if meta.get(INELIGIBLE_BY) == OWNER and QUARANTINE not in meta and CORDONED not in meta:
            if is_draining(node) and DRAINED in meta:
                self._api.cancel_drain(self.node_id)  # our drain, still running: it ends with the incident
            if node.get("SchedulingEligibility") == INELIGIBLE:
                written = self._api.set_eligibility(self.node_id, eligible=True)
                self._remember_eligibility(eligible=True, index=written)
                released = True
            changes[INELIGIBLE_BY] = None
        detail = self._write_changed(changes, node)
        return "metadata set, node eligible again" if released else detail

    # --- metadata and the view of the node ------------------------------------------------------------------

    def _write_meta(self, changes: Mapping[str, str | None]) -> None:
        """A retried metadata write (the drain runner's); raises NomadError when it fails."""
        self._retried(lambda: self._write_changed(dict(changes)), "metadata")

    def _write_changed(self, changes: MetaChanges, node: JsonObject | None = None) -> str:
        """Write only the keys whose value differs from the node (``node``, else our view of it)."""
        view = node if node is not None else self._view()
        current = self._meta(view) if view is not None else {}
        changed = {key: value for key, value in changes.items() if current.get(key) != value}
        if not changed:
            return "unchanged"
        self._api.write_metadata(self.node_id, changed)
        now = self._watch_clock()
        with self._lock:
            for key, value in changed.items():
                self._pending_meta[key] = (value, now)
        return "metadata set"

    def _meta(self, node: JsonObject) -> dict[str, str]:
        meta = node.get("Meta")
        return {str(k): str(v) for k, v in meta.items() if v is not None} if isinstance(meta, Mapping) else {}

    def _remember_eligibility(self, *, eligible: bool, index: int) -> None:
        with self._lock:
            self._pending_eligibility = (eligible, self._watch_clock(), index)

    def _with_pending(self, node: JsonObject) -> JsonObject:
        """The node with our writes it does not show yet. A metadata write is forgotten once the node shows
        it (dynamic metadata reaches the servers a few seconds later), an eligibility change once the node
        is as new as the write (a later change is someone else's), either after ``PENDING_TTL_S``."""
        now, index = self._watch_clock(), _index_of(node)
        meta = self._meta(node)
        view = dict(node)
        with self._lock:
            for key, (value, at) in list(self._pending_meta.items()):
                if meta.get(key) == value or now - at > PENDING_TTL_S:
                    del self._pending_meta[key]
                elif value is None:
                    meta.pop(key, None)
                else:
                    meta[key] = value
            if self._pending_eligibility is not None:
                eligible, at, written = self._pending_eligibility
                shown = (node.get("SchedulingEligibility") != INELIGIBLE) == eligible
                if (index >= written if written else shown) or now - at > PENDING_TTL_S:
                    self._pending_eligibility = None
                else:
                    view["SchedulingEligibility"] = ELIGIBLE if eligible else INELIGIBLE
        view["Meta"] = meta
        return view

    def _view(self) -> JsonObject | None:
        """The node as the watch last saw it, with our writes not shown yet (no request once synced)."""
        node = self._node()
        return None if node is None else self._with_pending(node)

    def _node(self) -> JsonObject | None:
        if self._watching and self._watch.synced:
            return self._watch.node()
        try:
            node = self._api.get_node(self.node_id)
        except NomadNotFound:
            self._watch.record(None)
            return None
        except NomadError as error:
            self._log.warning("could not read the node", error=error.describe())
            return self._watch.node()  # None before the first read: the planner then does nothing
        self._watch.record(node)
        return node

    def _fresh_node(self) -> JsonObject:
        """The node as it is now (a read), with our writes not shown yet; raises NomadError."""
        node = self._api.get_node(self.node_id)
        return self._with_pending(node)

    def _retried(self, operation: Callable[[], Any], name: str) -> Any:
        outcome = self._retry.call(operation, step=name)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    # --- 403 ------------------------------------------------------------------------------------------------

    def _failed(self, error: NomadError, name: str) -> str:
        if isinstance(error, NomadForbidden):
            problem = "Nomad refused the agent's token (HTTP 403): it needs node:write"
            if self._hold.refused(problem):
                self._log.error("nomad_forbidden", step=name, problem=problem, error=str(error))
            return f"forbidden: {problem}"
        self._log.warning("nomad request failed, giving up for this pass", step=name, error=error.describe())
        detail = error.describe()
        return f"unavailable: {detail}" if isinstance(error, NomadUnavailable) else detail

    def _recovered(self) -> None:
        if self._hold.allowed():
            self._log.info("nomad_writes_allowed_again")


def _index_of(node: Mapping[str, Any] | None) -> int:
    """The node's ModifyIndex (0 when unknown)."""
    try:
        return int(node.get("ModifyIndex", 0)) if node is not None else 0
    except (TypeError, ValueError):
        return 0


def _unavailable(report: ApplyReport) -> str | None:
    """Why the rest of the pass is skipped: an earlier step of it found Nomad unavailable."""
    for result in report.results:
        if not result.ok and result.detail.startswith("unavailable: "):
            return f"skipped: Nomad unavailable ({result.detail.removeprefix('unavailable: ')})"
    return None


def _meta_changes(step: Step) -> MetaChanges:
    match step:
        case SetCondition(status=status, reason=reason, message=message):
            return {CONDITION: status, REASON: reason, MESSAGE: message}
        case SetStateLabel(state=state):
            return {STATE: state}
        case SetIncidentAnnotation(incident_id=incident_id):
            if incident_id is None:  # the incident is over: its drain and requeue records go with it
                return {INCIDENT: None, DRAINED: None, REQUEUED: None}
            return {INCIDENT: incident_id}
        case SetUnhealthyGpus(uuids=uuids):
            return {UNHEALTHY_GPUS: ",".join(uuids) if uuids else None}
        case _:
            return {}
