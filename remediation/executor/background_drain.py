"""The part of the agent's background drain every orchestrator shares: one incident at a time, on a thread.

A drain runs on its own thread (``remediation.executor.worker_thread``) while the agent loop keeps ticking, so
the loop and the thread meet here, under one lock: the incident being drained and its phase, and the news the
loop has not collected yet (each update is handed out once). An orchestrator's runner subclasses
:class:`BackgroundDrain` and supplies the drain itself (``_drain_node``); this module decides whether a drain
may start, turns an error the drain raised into a failed drain, and records how the drain ended.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from core.aggregator_api import DrainPhase
from remediation.executor.worker_thread import start_worker, wait_for_worker


@dataclass(frozen=True)
class DrainUpdate:
    """One line for the aggregator's timeline: what the drain (``requeue=False``) or requeue did."""

    incident_id: str
    ok: bool
    detail: str
    requeue: bool = False


@dataclass
class DrainState:
    """The drain of one incident, as the runner knows it (an orchestrator may add what it reports)."""

    incident_id: str
    phase: DrainPhase = DrainPhase.RUNNING


StateT = TypeVar("StateT", bound=DrainState)


class BackgroundDrain(ABC, Generic[StateT]):
    """Drains one node in the background, one incident at a time; subclasses say how to drain.

    ``known_errors`` are the orchestrator's request errors: a drain ending on one fails with its
    ``describe`` text; anything else is a bug, logged with its traceback, and fails the drain too (never a
    silently dead thread).
    """

    known_errors: tuple[type[Exception], ...] = ()

    def __init__(self, log: Any, thread_name: str) -> None:
        self._log = log  # the runner's bound logger: the lines name the orchestrator's module
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._state: StateT | None = None
        self._updates: list[DrainUpdate] = []
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> StateT | None:
        """The latest drain's state (running or finished); None before the first."""
        with self._lock:
            return self._state

    def start(self, incident_id: str, deadline_s: float) -> str:
        """Start draining for ``incident_id`` unless a drain for it already started or another one still
        runs; answers at once with what happened."""
        with self._lock:
            current = self._state
            if current is not None and current.incident_id == incident_id:
                return f"drain for {incident_id} already {current.phase}"
            if current is not None and current.phase is DrainPhase.RUNNING:
                return f"drain for {current.incident_id} still running: {incident_id} waits"
            self._state = self._new_state(incident_id)
        self._thread = start_worker(self._run, (incident_id, deadline_s), self._thread_name)
        return "drain started"

    def updates(self) -> list[DrainUpdate]:
        """What happened since the last call (each update is returned once)."""
        with self._lock:
            taken, self._updates = self._updates, []
        return taken

    def wait(self, timeout_s: float) -> bool:
        """Wait for the running drain (and its requeue) to end; True when none runs (tests, shutdown)."""
        return wait_for_worker(self._thread, timeout_s)

    # --- for the subclasses --------------------------------------------------------------------------------

    @abstractmethod
    def _new_state(self, incident_id: str) -> StateT:
        """The state record of a drain that starts now."""

    @abstractmethod
    def _drain_node(self, incident_id: str, deadline_s: float) -> None:
        """The drain itself, on the worker thread; it reports through ``_finish`` and ``_record``."""

    def _describe(self, error: Exception) -> str:
        """One line for an error of ``known_errors``."""
        return str(error)

    def _record(self, update: DrainUpdate, edit: Callable[[StateT], None] | None = None) -> None:
        """Queue ``update`` for the loop, applying ``edit`` to the current state (if any) at the same time."""
        with self._lock:
            if edit is not None and self._state is not None:
                edit(self._state)
            self._updates.append(update)

    def _edit(self, edit: Callable[[StateT], None]) -> None:
        """Apply ``edit`` to the current state (if any) under the lock the loop reads it with."""
        with self._lock:
            if self._state is not None:
                edit(self._state)

    def _finish(self, incident_id: str, phase: DrainPhase, detail: str) -> None:
        """The drain of ``incident_id`` ended in ``phase``: record it, queue the news, log the outcome."""
        with self._lock:
            if self._state is not None and self._state.incident_id == incident_id:
                self._state.phase = phase
            self._updates.append(DrainUpdate(incident_id, ok=phase is DrainPhase.COMPLETE, detail=detail))
        self._log.info("drain_outcome", incident=incident_id, phase=str(phase), detail=detail)

    # --- the background thread -----------------------------------------------------------------------------

    def _run(self, incident_id: str, deadline_s: float) -> None:
        try:
            self._drain_node(incident_id, deadline_s)
        except self.known_errors as error:
            self._finish(incident_id, DrainPhase.FAILED, f"drain failed: {self._describe(error)}")
        except Exception as exc:  # noqa: BLE001 - a bug must end as a failed drain, not a silent thread
            self._log.exception("drain_crashed", incident=incident_id)
            self._finish(incident_id, DrainPhase.FAILED, f"drain failed: {type(exc).__name__}: {exc}")
