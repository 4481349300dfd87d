"""The node's drain when the central remediator runs it (``drain_by: aggregator``, the default).

The agent no longer holds the credentials to evict pods or restart jobs (docs/security.md). When its plan
reaches ``Drain``, it orders the drain from the aggregator under the permit it holds for the incident
(``POST /v1/permits/{id}/drain``); the remediator beside the aggregator drains and requeues, and the agent
reads the progress back (``GET``, its own permit only) to advance its plan: the drain's end lets recovery
reset or reboot, and the drain's and requeue's news go to the timeline as before.

:class:`CentralDrainExecutor` puts this in front of the orchestrator's executor, which keeps what concerns
the node alone (condition, label, taint, cordon, Events), so the loop, the planner and recovery are the same
whichever side drains. With the aggregator unreachable the node is still marked and tainted (those steps
never needed it), the drain waits for a permit, and a drain already running centrally goes on: only its news
reaches the agent later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from agent.uplink.client import AggregatorClient, AggregatorError, NotFound
from agent.uplink.permit_gate import PermitGate
from core.aggregator_api import OPEN_DRAIN_PHASES, DrainPhase
from core.aggregator_api import CentralDrain as DrainRecord
from core.steps import Drain, NodeFacts, Step, StepResult
from remediation.executor.contract import NodeExecutor, WrappingExecutor

log = structlog.get_logger(__name__)

UNREACHABLE_RETRY_S = 30.0  # after a failed read, the drain is read again this much later


@dataclass(frozen=True)
class CentralProgress:
    """The central drain of an incident as the agent last read it (``requested`` reads as running)."""

    incident_id: str
    phase: str
    permit_id: int
    finished: bool = False  # the drain and the requeue after it both ended: nothing more will come


@dataclass(frozen=True)
class CentralNews:
    """One line of the central drain's news (``DrainNews``)."""

    incident_id: str
    ok: bool
    detail: str
    requeue: bool


class CentralDrain:
    """Orders the node's drain from the aggregator and follows it; one incident at a time."""

    def __init__(
        self,
        node: str,
        client: AggregatorClient | None,
        gate: PermitGate,
        *,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
        poll_s: float = 2.0,
    ) -> None:
        self._client = client
        self._gate = gate
        self._monotonic = monotonic
        self._sleep = sleep
        self._poll_s = poll_s
        self._progress: CentralProgress | None = None
        self._seen = 0  # news lines already handed to the loop
        self._news: list[CentralNews] = []
        self._next_read = float("-inf")
        self._adopted = False  # the node's latest drain was looked up (or an order of ours came first)
        self._node = node
        self._log = log.bind(node=node)

    @property
    def state(self) -> CentralProgress | None:
        """The latest central drain as last read (running until it ended); None before the first."""
        return self._progress

    def start(self, step: Drain) -> StepResult:
        """Order the drain of ``step``'s incident under the permit held for it."""
        if self._client is None:
            return StepResult(step, ok=False, detail="no aggregator configured: no central drain", attempts=0)
        permit = self._gate.held
        if permit is None or permit.incident_id != step.incident_id:
            return StepResult(step, ok=False, detail="no permit held for the drain", attempts=0)
        try:
            answer = self._client.order_drain(permit.id, deadline_s=step.deadline_s)
        except AggregatorError as exc:
            return StepResult(step, ok=False, detail=f"drain order failed: {exc}")
        self._seen = 0
        self._adopted = True
        self._take(answer, step.incident_id)
        self._log.info("central_drain_ordered", permit=permit.id, incident=step.incident_id)
        detail = f"drain ordered from the central remediator (permit {permit.id})"
        return StepResult(step, ok=True, detail=detail)

    def refresh(self) -> None:
        """Read the drain back until it and its requeue ended, at most every ``poll_s`` (a failure keeps the
        last answer).
        Before the first order of this process, the node's latest drain is looked up once: an agent that
        restarted while its drain ran (or after it ended) follows it on, and recovery goes on from it."""
        progress = self._progress
        if self._client is None or (progress is not None and progress.finished):
            return
        if progress is None and self._adopted:
            return
        now = self._monotonic()
        if now < self._next_read:
            return
        self._next_read = now + self._poll_s
        try:
            if progress is None:
                self._adopt(self._client.latest_drain(self._node))
            else:
                self._take(self._client.drain_of(progress.permit_id), progress.incident_id)
        except NotFound:
            self._adopted = True  # no drain was ever ordered for this node
        except AggregatorError as exc:  # unreachable: look again later, not on every pass
            self._next_read = now + max(self._poll_s, UNREACHABLE_RETRY_S)
            self._log.debug("central_drain_unread", error=str(exc))

    def _adopt(self, answer: DrainRecord) -> None:
        """Follow the drain a previous agent process ordered; its news before now were that one's to send."""
        self._adopted = True
        if self._progress is not None or answer.incident_id is None:
            return
        self._seen = answer.news[-1].seq if answer.news else 0
        self._take(answer, answer.incident_id)
        self._log.info("central_drain_adopted", permit=answer.permit_id, incident=answer.incident_id)

    def updates(self) -> list[CentralNews]:
        """The news since the last call, each once, after reading the drain back (the loop asks after it
        acted, so a slow aggregator never delays the pass's taint)."""
        self.refresh()
        taken, self._news = self._news, []
        return taken

    def wait(self, timeout_s: float) -> bool:
        """Wait for the central drain and its requeue to end; True when none runs (tools, tests)."""
        deadline = self._monotonic() + timeout_s
        while self._progress is not None and not self._progress.finished:
            if self._monotonic() >= deadline:
                return False
            self._next_read = float("-inf")
            self.refresh()
            if not self._progress.finished:
                self._sleep(min(self._poll_s, 0.2))
        return True

    def _take(self, answer: DrainRecord, incident_id: str) -> None:
        phase = DrainPhase.RUNNING if answer.phase in OPEN_DRAIN_PHASES else answer.phase
        finished = answer.finished_at is not None
        self._progress = CentralProgress(incident_id, phase, answer.permit_id, finished)
        fresh = [item for item in answer.news if item.seq > self._seen]
        for item in fresh:
            self._news.append(CentralNews(incident_id, item.ok, item.detail, item.requeue))
        if fresh:
            self._seen = fresh[-1].seq


class CentralDrainExecutor(WrappingExecutor):
    """The orchestrator's executor, with ``Drain`` ordered from the central remediator instead."""

    def __init__(self, wrapped: NodeExecutor, central: CentralDrain) -> None:
        super().__init__(wrapped)
        self.central = central

    def takes(self, step: Step) -> bool:
        return isinstance(step, Drain)

    def apply_own(self, step: Step, *, dry_run: bool) -> StepResult:
        assert isinstance(step, Drain)
        if dry_run:
            return StepResult(step, ok=True, detail="dry-run", attempts=0)
        return self.central.start(step)

    def facts(self) -> NodeFacts:
        facts = self.wrapped.facts()
        state = self.central.state  # as read after the last pass acted (no network call before the taint)
        if state is None or not facts.exists:
            return facts
        return dataclasses.replace(facts, drained_incident=state.incident_id)

    @property
    def can_drain(self) -> bool:
        return True

    @property
    def drain_state(self) -> CentralProgress | None:
        return self.central.state

    def drain_updates(self) -> list[CentralNews]:
        return self.central.updates()

    def wait_for_drain(self, timeout_s: float) -> bool:
        return self.central.wait(timeout_s)
