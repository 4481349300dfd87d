"""``dcgmi`` as a source of findings: ``dcgmi health -c -j`` on a slow poll, ``dcgmi diag -r N -j`` on demand.

Runs the binary with an argument list and a timeout (never a shell). A missing binary, a timeout, or a
non-zero exit whose output is not the expected JSON all become one ``unknown`` finding
(``DCGMI_UNAVAILABLE``): DCGM being absent or broken is not a GPU fault. ``dcgmi diag`` exits non-zero
when a test fails yet still prints its JSON, so the output is parsed whatever the exit code.

:func:`run_diag` is the entry point for on-demand diagnostics (scheduled deep checks, validation after a
repair): it returns a :class:`DiagRun` with ``passed`` and the per-test results.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog

from agent.snapshot import NodeSnapshot
from checks.dcgm import unavailable_finding
from checks.dcgmi import (
    CHECK_HEALTH,
    DcgmiOutputError,
    DiagResult,
    HealthReport,
    diag_findings,
    health_findings,
    parse_diag,
    parse_health,
)
from checks.findings import Finding

log = structlog.get_logger(__name__)

DEFAULT_PATH = "dcgmi"
UNAVAILABLE_CODE = "DCGMI_UNAVAILABLE"
DIAG_LEVELS = (1, 2, 3, 4)
_STDERR_TAIL = 200
_T = TypeVar("_T")


class DcgmiError(Exception):
    """dcgmi could not be run, timed out, or printed no usable JSON; the message is one line."""


@dataclass(frozen=True, slots=True)
class DiagRun:
    """One on-demand diagnostic: its level, the parsed result, and how long it took."""

    level: int
    result: DiagResult
    seconds: float

    @property
    def passed(self) -> bool:
        return self.result.passed

    def findings(self, uuids: Mapping[int, str]) -> list[Finding]:
        return diag_findings(self.result, uuids)


def run_dcgmi(
    args: list[str], *, path: str = DEFAULT_PATH, timeout_s: float, host: str | None = None
) -> tuple[int, str]:
    """Run ``dcgmi ARGS``; its exit code and stdout. DcgmiError when it cannot run or runs too long.

    ``host``: the host engine's address (``--host``, an option of each subcommand) when it is not local, as
    in a pod without host networking that reaches nv-hostengine on the node's address.
    """
    binary = shutil.which(path)
    if binary is None:
        raise DcgmiError(f"{path}: not found")
    if host:
        args = [args[0], "--host", host, *args[1:]]
    try:
        completed = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise DcgmiError(f"{path} {' '.join(args)}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise DcgmiError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    return completed.returncode, completed.stdout or completed.stderr[-_STDERR_TAIL:]


def _parsed(
    parse: Callable[[str], _T], args: list[str], *, path: str, timeout_s: float, host: str | None
) -> _T:
    code, output = run_dcgmi(args, path=path, timeout_s=timeout_s, host=host)
    try:
        return parse(output)
    except DcgmiOutputError as exc:
        tail = " ".join(output.split())[:_STDERR_TAIL]
        raise DcgmiError(f"{path} {' '.join(args)} exited {code}: {exc}; output: {tail!r}") from None


def run_health(*, path: str = DEFAULT_PATH, timeout_s: float = 30.0, host: str | None = None) -> HealthReport:
    """``dcgmi health -c -j`` parsed; DcgmiError when it cannot run or prints no health document."""
    return _parsed(parse_health, ["health", "-c", "-j"], path=path, timeout_s=timeout_s, host=host)


def run_diag(level: int, timeout_s: float, *, path: str = DEFAULT_PATH, host: str | None = None) -> DiagRun:
    """``dcgmi diag -r LEVEL -j`` parsed (levels 1-4; 3 takes about 15 minutes). DcgmiError on failure."""
    if level not in DIAG_LEVELS:
        raise ValueError(f"diag level must be one of {DIAG_LEVELS}, got {level}")
    started = time.monotonic()
    args = ["diag", "-r", str(level), "-j"]
    result = _parsed(parse_diag, args, path=path, timeout_s=timeout_s, host=host)
    return DiagRun(level=level, result=result, seconds=time.monotonic() - started)


class DcgmiHealthSource:
    """Runs ``dcgmi health -c -j`` at most every ``every_s`` seconds; findings against the snapshot's GPUs.

    DCGM's PCIe, thermal and power watches need about a minute of samples, and the check is not free,
    hence a slower poll than the loop's, with the last result cached in between. Never raises.
    """

    def __init__(
        self,
        *,
        path: str = DEFAULT_PATH,
        host: str | None = None,
        timeout_s: float = 30.0,
        every_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._host = host
        self._timeout_s = timeout_s
        self._every_s = every_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: tuple[float, HealthReport | str] | None = None

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]:
        with self._lock:
            now = self._monotonic()
            if self._last is None or now - self._last[0] >= self._every_s:
                self._last = (now, self._check())
            outcome = self._last[1]
        if isinstance(outcome, str):
            return [unavailable_finding(CHECK_HEALTH, UNAVAILABLE_CODE, f"dcgmi unavailable: {outcome}")]
        return health_findings(outcome, {gpu.index: gpu.uuid for gpu in snapshot.gpus})

    def _check(self) -> HealthReport | str:
        try:
            return run_health(path=self._path, timeout_s=self._timeout_s, host=self._host)
        except DcgmiError as exc:
            log.warning("dcgmi_unavailable", error=str(exc))
            return str(exc)
