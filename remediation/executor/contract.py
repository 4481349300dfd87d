"""What the agent asks of an orchestrator executor, in full: the :class:`NodeExecutor` protocol.

Both executors (``remediation.kubernetes.executor`` and ``remediation.nomad.executor``) implement every
member, most of them through ``remediation.executor.common.ExecutorCommon``. ``WrappingExecutor`` (below)
is the base of the agent's wrappers (``agent.recovery.executor.RecoveringExecutor``,
``agent.uplink.central_drain.CentralDrainExecutor``): each takes some steps itself and forwards the rest. The
loop calls nothing that is not declared here, so a new orchestrator knows exactly what to provide.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

from core.steps import ApplyReport, NodeFacts, Step, StepResult


class ExecutorSetupError(Exception):
    """An executor cannot be set up (no kubeconfig or cluster, no local Nomad client, an unreadable token
    file): raised only while the agent starts, and told in one line. Each orchestrator's own setup error
    derives from it, so the command line catches it without importing either client library."""


class DrainProgress(Protocol):
    """Where the node's background drain stands: the incident it drains and its phase (``running`` until it
    ended; then ``complete``, ``incomplete`` or ``failed``)."""

    @property
    def incident_id(self) -> str: ...

    @property
    def phase(self) -> str: ...


class DrainNews(Protocol):
    """One update of a background drain or of the requeue after it, for the aggregator's timeline."""

    @property
    def incident_id(self) -> str: ...

    @property
    def ok(self) -> bool: ...

    @property
    def detail(self) -> str: ...

    @property
    def requeue(self) -> bool: ...


class NodeExecutor(Protocol):
    """Applies plan steps to one node and reports what it observes there.

    ``facts()`` is served from the executor's watch of its own node (no API call); ``wait_for_change``
    lets the loop wake when someone else changed the node (a human uncordon, our taint removed: drift).
    An executor built without a drain answers ``can_drain`` False, ``drain_state`` None and no news.
    """

    def facts(self) -> NodeFacts:
        """The node as the executor last saw it."""
        ...

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        """Perform the steps in order; never raises for orchestrator errors (a failed step says why)."""
        ...

    def wait_for_change(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a change on the node that was not ours; True when one came."""
        ...

    @property
    def synced(self) -> bool:
        """True once the node has been read at least once (the agent is ready only then)."""
        ...

    @property
    def can_drain(self) -> bool:
        """True when a ``Drain`` step starts a background drain (drain is on)."""
        ...

    @property
    def drain_state(self) -> DrainProgress | None:
        """The latest drain of this node, running or ended; None when none started."""
        ...

    def drain_updates(self) -> Sequence[DrainNews]:
        """The drain's and the requeue's news since the last call, each once."""
        ...

    def wait_for_drain(self, timeout_s: float) -> bool:
        """Wait for a running drain and its requeue to end; True when none runs (tools, tests)."""
        ...

    @property
    def problem(self) -> str | None:
        """Why the executor cannot act now (a refusal it holds its writes for), or None."""
        ...

    @property
    def writes_total(self) -> int:
        """Mutating requests sent so far (metrics, benchmarks: a healthy node makes none)."""
        ...

    @property
    def requests_total(self) -> int:
        """Every request sent so far, reads and the watch's included."""
        ...

    def close(self) -> None:
        """Stop the watch and any drain thread; idempotent."""
        ...


class WrappingExecutor(ABC):
    """A :class:`NodeExecutor` around another one that takes some steps itself (``takes`` / ``apply_own``).

    :meth:`apply` sends each run of the other steps to the wrapped executor at once and keeps the results in
    plan order; every other member answers with the wrapped executor's answer until a subclass replaces it.
    """

    def __init__(self, wrapped: NodeExecutor) -> None:
        self.wrapped = wrapped

    @abstractmethod
    def takes(self, step: Step) -> bool:
        """Whether this wrapper performs ``step`` itself (by :meth:`apply_own`)."""

    @abstractmethod
    def apply_own(self, step: Step, *, dry_run: bool) -> StepResult:
        """Perform one step this wrapper takes."""

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        report = ApplyReport()
        batch: list[Step] = []
        for step in steps:
            if not self.takes(step):
                batch.append(step)
                continue
            self._flush(batch, report, dry_run=dry_run)
            report.results.append(self.apply_own(step, dry_run=dry_run))
        self._flush(batch, report, dry_run=dry_run)
        return report

    def _flush(self, batch: list[Step], report: ApplyReport, *, dry_run: bool) -> None:
        if batch:
            report.results.extend(self.wrapped.apply(batch, dry_run=dry_run).results)
            batch.clear()

    def facts(self) -> NodeFacts:
        return self.wrapped.facts()

    def wait_for_change(self, timeout_s: float) -> bool:
        return self.wrapped.wait_for_change(timeout_s)

    @property
    def synced(self) -> bool:
        return self.wrapped.synced

    @property
    def can_drain(self) -> bool:
        return self.wrapped.can_drain

    @property
    def drain_state(self) -> DrainProgress | None:
        return self.wrapped.drain_state

    def drain_updates(self) -> Sequence[DrainNews]:
        return self.wrapped.drain_updates()

    def wait_for_drain(self, timeout_s: float) -> bool:
        return self.wrapped.wait_for_drain(timeout_s)

    @property
    def problem(self) -> str | None:
        return self.wrapped.problem

    @property
    def writes_total(self) -> int:
        return self.wrapped.writes_total

    @property
    def requests_total(self) -> int:
        return self.wrapped.requests_total

    def close(self) -> None:
        self.wrapped.close()
