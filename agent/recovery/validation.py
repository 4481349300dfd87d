"""Validation after a GPU reset or a reboot, before the node is released.

A :class:`Validator` answers once, when the ``Validate`` step runs: :class:`DcgmiValidator` runs
``dcgmi diag -r <level>`` through ``agent/backends/dcgm/dcgmi.py`` when the binary is there; without it (or
when it cannot run) the answer is "passed, by readings only". Either way the readings then decide: the node is
``testing`` until ``recovery.validation.clean_readings`` consecutive clean readings release it, and a
fault seen meanwhile fails the validation (the state machine's rule). A diagnostic that ran and failed a
test fails the validation at once.

``-r 2`` takes about two minutes, so the diagnostic runs on a thread of its own
(``agent.recovery.background``) and the loop collects its outcome on a later pass; :meth:`Validator.immediate`
answers at once, on the loop's thread, when no diagnostic will run at all.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agent.backends.dcgm.dcgmi import DcgmiError, DcgmiProcesses, DiagRun, run_diag


@dataclass(frozen=True)
class ValidationOutcome:
    """Whether validation may go on to the clean readings, with one line for the timeline."""

    passed: bool
    detail: str


class Validator(Protocol):
    """Checks the GPUs once after a reset or a reboot."""

    def immediate(self) -> ValidationOutcome | None:
        """The outcome at once when no diagnostic will run (no tool); None: ``validate`` must run."""
        ...

    def validate(self) -> ValidationOutcome:
        """Run the diagnostic (minutes): called on a background thread."""
        ...


@runtime_checkable
class StoppableValidator(Protocol):
    """A validator whose running diagnostic can be ended at agent shutdown."""

    def stop(self) -> None: ...


class ReadingsOnly:
    """No diagnostic tool: validation is the clean readings alone."""

    def __init__(self, clean_readings: int) -> None:
        self._clean_readings = clean_readings

    def immediate(self) -> ValidationOutcome:
        return ValidationOutcome(True, f"no diagnostic: validating by {self._clean_readings} clean readings")

    def validate(self) -> ValidationOutcome:
        return self.immediate()


DiagRunner = Callable[[int, float], DiagRun]


class DcgmiValidator:
    """``dcgmi diag -r <level>`` when dcgmi is installed, then the clean readings."""

    def __init__(
        self,
        *,
        path: str,
        host: str | None = None,
        level: int,
        timeout_s: float,
        clean_readings: int,
        runner: DiagRunner | None = None,
    ) -> None:
        self._path = path
        self._level = level
        self._timeout_s = timeout_s
        self._fallback = ReadingsOnly(clean_readings)
        self._processes = DcgmiProcesses()
        self._runner: DiagRunner = runner or (
            lambda level, timeout: run_diag(level, timeout, path=path, host=host, processes=self._processes)
        )

    def stop(self) -> None:
        """Agent shutdown: end a running ``dcgmi diag`` (its process group); no new one starts."""
        self._processes.stop()

    def immediate(self) -> ValidationOutcome | None:
        return self._fallback.immediate() if shutil.which(self._path) is None else None

    def validate(self) -> ValidationOutcome:
        if shutil.which(self._path) is None:
            return self._fallback.validate()
        try:
            run = self._runner(self._level, self._timeout_s)
        except DcgmiError as exc:  # dcgmi broken or absent is not a GPU fault: the readings decide
            return ValidationOutcome(True, f"dcgmi diag could not run ({exc}); validating by readings")
        if run.passed:
            return ValidationOutcome(True, f"dcgmi diag -r {self._level} passed in {run.seconds:.0f} s")
        failed = ", ".join(run.result.failed_tests) or "no test ran"
        return ValidationOutcome(False, f"dcgmi diag -r {self._level} failed: {failed}")
