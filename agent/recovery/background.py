"""The validation's diagnostic on a thread of its own, so the loop keeps handling XIDs and facts meanwhile.

``dcgmi diag -r 2`` takes about two minutes. :class:`BackgroundValidation` starts it on a daemon thread and
answers at once; the planner sees the running incident in ``NodeFacts.validation_running`` and plans
nothing for it; once the run ended (the loop is woken), the next ``Validate`` step is answered with the
outcome kept here. Nothing here is persisted: an agent restarted mid-run finds no run and no outcome, the
record in the state file still says ``validating``, and the validation starts again — at most
``recovery.validation.max_starts`` times per incident (the record counts the starts), then it escalates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from agent.recovery.validation import ValidationOutcome
from remediation.executor.worker_thread import start_worker, wait_for_worker

log = structlog.get_logger(__name__)


class BackgroundValidation:
    """At most one validation run at a time; its outcome is handed out once, to its own incident."""

    def __init__(self, node: str, wake: threading.Event | None = None) -> None:
        self._node = node
        self._wake = wake
        self._lock = threading.Lock()
        self._running: str | None = None
        self._finished: tuple[str, ValidationOutcome] | None = None
        self._thread: threading.Thread | None = None
        self._log = log.bind(node=node)

    @property
    def running(self) -> str | None:
        """The incident whose validation runs now, if any."""
        with self._lock:
            return self._running

    def take(self, incident_id: str) -> ValidationOutcome | None:
        """The ended run's outcome for this incident (handed out once), or None."""
        with self._lock:
            if self._finished is None or self._finished[0] != incident_id:
                return None
            outcome, self._finished = self._finished[1], None
            return outcome

    def start(self, incident_id: str, validate: Callable[[], ValidationOutcome]) -> str | None:
        """Start ``validate`` for the incident; None when started, else why not (one already runs)."""
        with self._lock:
            if self._running is not None:
                return f"the validation of {self._running} is still running"
            self._running, self._finished = incident_id, None
        # A daemon thread: a diagnostic must not keep a stopping agent alive; a restart runs it again.
        self._thread = start_worker(self._run, (incident_id, validate), f"gpuhealth-validate:{self._node}")
        return None

    def wait(self, timeout_s: float) -> bool:
        """Wait for the running validation to end; True when none runs (tests, shutdown)."""
        return wait_for_worker(self._thread, timeout_s)

    def _run(self, incident_id: str, validate: Callable[[], ValidationOutcome]) -> None:
        try:
            outcome = validate()
        except Exception as exc:  # noqa: BLE001 - our bug is no GPU fault: the clean readings still decide
            self._log.exception("validation_crashed", incident=incident_id)
            outcome = ValidationOutcome(True, f"validation could not run ({type(exc).__name__}); by readings")
        with self._lock:
            self._running, self._finished = None, (incident_id, outcome)
        self._log.info("validation_ended", incident=incident_id, passed=outcome.passed, detail=outcome.detail)
        if self._wake is not None:  # the loop collects the outcome now rather than at its next interval
            self._wake.set()
