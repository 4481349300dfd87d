"""What every executor answers the same way, whatever its orchestrator: its drain, its counters, its watch.

The agent loop, the wiring and the benchmarks ask an executor the same questions (is a drain running, what
did it report, how many requests went out, has the watch seen the node, why can it not act). The answers
come from parts each executor builds for its orchestrator (an API with counters, a node watch, a
``BackgroundDrain``, a ``ForbiddenHold``); :class:`ExecutorCommon` asks those parts, so the two executors
cannot drift apart in what they say.
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol

from remediation.executor.background_drain import BackgroundDrain, DrainUpdate, StateT
from remediation.executor.forbidden_hold import ForbiddenHold


class CountingApi(Protocol):
    """An orchestrator API that counts what it sent."""

    @property
    def writes_total(self) -> int: ...

    @property
    def requests_total(self) -> int: ...


class NodeWatching(Protocol):
    """A watch of the executor's node (a long poll or a watch stream)."""

    @property
    def synced(self) -> bool: ...

    def wait_synced(self, timeout_s: float) -> bool: ...

    def wait_for_change(self, timeout_s: float) -> bool: ...


class ExecutorCommon(Generic[StateT]):
    """The executor's answers that only ask its parts; the executor sets them in its ``__init__``."""

    _api: CountingApi
    _watch: NodeWatching
    _watching: bool  # False for one-shot tools: no watch thread, the node is read on every call
    _closed: threading.Event
    _hold: ForbiddenHold
    _drain: BackgroundDrain[StateT] | None

    def wait_for_change(self, timeout_s: float) -> bool:
        """True when the watch saw the node change for another reason than our writes (a human, drift)."""
        if not self._watching:
            self._closed.wait(max(timeout_s, 0.0))
            return False
        return self._watch.wait_for_change(timeout_s)

    @property
    def can_drain(self) -> bool:
        """True when built with a drain setup: a ``Drain`` step then starts a background drain."""
        return self._drain is not None

    @property
    def drain_state(self) -> StateT | None:
        """The latest drain of this node (running or finished); None when none started or drain is off."""
        return self._drain.state if self._drain is not None else None

    def drain_updates(self) -> list[DrainUpdate]:
        """The drain's news since the last call (started, outcome, requeue), each once, for the timeline."""
        return self._drain.updates() if self._drain is not None else []

    def wait_for_drain(self, timeout_s: float) -> bool:
        """Wait for a running drain and its requeue to end; True when none runs."""
        return self._drain.wait(timeout_s) if self._drain is not None else True

    @property
    def writes_total(self) -> int:
        """Mutating requests sent, failed attempts included."""
        return self._api.writes_total

    @property
    def requests_total(self) -> int:
        """Every request sent: reads, writes and the watch's."""
        return self._api.requests_total

    @property
    def synced(self) -> bool:
        """True once the node has been read at least once (by the watch or directly)."""
        return self._watch.synced

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait for the watch's first answer; False on timeout (e.g. the orchestrator is down)."""
        return self._watch.wait_synced(timeout_s)

    @property
    def problem(self) -> str | None:
        """Why the executor cannot act right now (a 403 it is holding its writes for), or None."""
        return self._hold.problem
