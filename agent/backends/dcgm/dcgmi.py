"""``dcgmi`` as a source of readings: ``dcgmi health -c -j`` on a slow poll, ``dcgmi diag -r N -j`` on demand.

Runs the binary with an argument list and a timeout (never a shell), in a process group of its own so that
a timeout or :meth:`DcgmiProcesses.stop` (agent shutdown) ends ``dcgmi`` and the test processes it spawned
together. A missing binary, a timeout, or a non-zero exit whose output is not the expected JSON all become
a ``health_error`` reading, which the checks judge as one ``unknown`` finding (``DCGMI_UNAVAILABLE``): DCGM
being absent or broken is not a GPU fault. ``dcgmi diag`` exits non-zero when a test fails yet still prints
its JSON, so the output is parsed whatever the exit code.

:func:`run_diag` is the entry point for on-demand diagnostics (scheduled deep checks, validation after a
repair): it returns a :class:`DiagRun` with ``passed`` and the per-test results.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from agent.backends.dcgm.dcgmi_output import DcgmiOutputError, parse_diag, parse_health
from core.child_env import child_environment
from core.dcgm import DcgmReadings, DiagResult, HealthReport
from core.snapshot import NodeSnapshot

log = structlog.get_logger(__name__)

DEFAULT_PATH = "dcgmi"
DIAG_LEVELS = (1, 2, 3, 4)
_STDERR_TAIL = 200
STOP_GRACE_S = 2.0  # SIGTERM first (dcgmi cleans up its diagnostic), SIGKILL after this long
_T = TypeVar("_T")


class DcgmiError(Exception):
    """dcgmi could not be run, timed out, or printed no usable JSON; the message is one line."""


class DcgmiStopped(DcgmiError):
    """The run was ended (or refused) because its owner is shutting down."""


class DcgmiProcesses:
    """The ``dcgmi`` processes one owner (deep diagnostics, validation) runs; :meth:`stop` ends them.

    Each run leads a new session, so its whole process group (``nvvs`` and the plugins ``dcgmi diag``
    starts) is signalled, never anything else. After :meth:`stop` no new run starts.
    """

    def __init__(self, *, grace_s: float = STOP_GRACE_S) -> None:
        self._grace_s = grace_s
        self._changed = threading.Condition()
        self._running: set[subprocess.Popen[str]] = set()
        self._stopped = False

    @property
    def running(self) -> int:
        """How many runs are in progress (tests)."""
        with self._changed:
            return len(self._running)

    def run(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of ``argv``; TimeoutExpired (its group killed), OSError, or
        DcgmiStopped when stopped before or during the run."""
        with self._changed:  # under the lock: a stop() racing the start still sees the process
            if self._stopped:
                raise DcgmiStopped("dcgmi not started: shutting down")
            process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                env=child_environment(),  # never the agent's tokens
            )
            self._running.add(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.communicate(timeout=STOP_GRACE_S)  # reap it and close its pipes
            raise
        finally:
            with self._changed:
                self._running.discard(process)
                self._changed.notify_all()
        if self._stopped:
            raise DcgmiStopped(f"dcgmi {' '.join(argv[1:3])} ended: shutting down")
        return process.returncode, stdout or "", stderr or ""

    def stop(self) -> None:
        """End every run and refuse new ones (idempotent): SIGTERM to each run's group, so dcgmi can clean
        up; SIGKILL to what is left after the grace. Returns once the runs have ended (or the grace twice)."""
        with self._changed:
            self._stopped = True
            running = list(self._running)
        for process in running:
            log.info("dcgmi_stopping", pid=process.pid)
            _signal_group(process, signal.SIGTERM)
        with self._changed:
            self._changed.wait_for(lambda: not self._running, timeout=self._grace_s)
            left = list(self._running)
        for process in (*running, *left):  # stragglers of a group whose leader already exited, too
            _signal_group(process, signal.SIGKILL)
        with self._changed:
            self._changed.wait_for(lambda: not self._running, timeout=self._grace_s)


def _signal_group(process: subprocess.Popen[str], number: signal.Signals) -> None:
    """Signal the run's process group (its id is the leader's pid: ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


@dataclass(frozen=True, slots=True)
class DiagRun:
    """One on-demand diagnostic: its level, the parsed result, how long it took, and what dcgmi printed."""

    level: int
    result: DiagResult
    seconds: float
    output: str = ""  # dcgmi's raw output, whole (the runner sends its redacted tail)

    @property
    def passed(self) -> bool:
        return self.result.passed


def run_dcgmi(
    args: list[str],
    *,
    path: str = DEFAULT_PATH,
    timeout_s: float,
    host: str | None = None,
    processes: DcgmiProcesses | None = None,
) -> tuple[int, str]:
    """Run ``dcgmi ARGS``; its exit code and stdout. DcgmiError when it cannot run or runs too long.

    ``host``: the host engine's address (``--host``, an option of each subcommand) when it is not local, as
    in a pod without host networking that reaches nv-hostengine on the node's address. ``processes``: the
    owner that can end the run at shutdown (a private one when not given).
    """
    binary = shutil.which(path)
    if binary is None:
        raise DcgmiError(f"{path}: not found")
    if host:
        args = [args[0], "--host", host, *args[1:]]
    owner = processes if processes is not None else DcgmiProcesses()
    try:
        code, stdout, stderr = owner.run([binary, *args], timeout_s)
    except subprocess.TimeoutExpired:
        raise DcgmiError(f"{path} {' '.join(args)}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise DcgmiError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    return code, stdout or stderr[-_STDERR_TAIL:]


def _parsed(
    parse: Callable[[str], _T],
    args: list[str],
    *,
    path: str,
    timeout_s: float,
    host: str | None,
    processes: DcgmiProcesses | None = None,
) -> _T:
    code, output = run_dcgmi(args, path=path, timeout_s=timeout_s, host=host, processes=processes)
    try:
        return parse(output)
    except DcgmiOutputError as exc:
        tail = " ".join(output.split())[:_STDERR_TAIL]
        raise DcgmiError(f"{path} {' '.join(args)} exited {code}: {exc}; output: {tail!r}") from None


def run_health(*, path: str = DEFAULT_PATH, timeout_s: float = 30.0, host: str | None = None) -> HealthReport:
    """``dcgmi health -c -j`` parsed; DcgmiError when it cannot run or prints no health document."""
    return _parsed(parse_health, ["health", "-c", "-j"], path=path, timeout_s=timeout_s, host=host)


def run_diag(
    level: int,
    timeout_s: float,
    *,
    path: str = DEFAULT_PATH,
    host: str | None = None,
    processes: DcgmiProcesses | None = None,
) -> DiagRun:
    """``dcgmi diag -r LEVEL -j`` parsed (levels 1-4; 3 takes about 15 minutes). DcgmiError on failure;
    DcgmiStopped when ``processes`` was stopped (agent shutdown) before or during the run."""
    if level not in DIAG_LEVELS:
        raise ValueError(f"diag level must be one of {DIAG_LEVELS}, got {level}")
    started = time.monotonic()
    args = ["diag", "-r", str(level), "-j"]
    raw: list[str] = []

    def parse(output: str) -> DiagResult:
        raw.append(output)
        return parse_diag(output)

    result = _parsed(parse, args, path=path, timeout_s=timeout_s, host=host, processes=processes)
    return DiagRun(level=level, result=result, seconds=time.monotonic() - started, output=raw[0])


class DcgmiHealthSource:
    """Runs ``dcgmi health -c -j`` at most every ``every_s`` seconds; its report (or why not) as readings.

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
        self._last: tuple[float, DcgmReadings] | None = None

    def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
        """The latest ``dcgmi health`` report (run now if the cached one is older than ``every_s``)."""
        del snapshot  # dcgmi names GPUs by index; the check maps them to the snapshot's UUIDs
        with self._lock:
            now = self._monotonic()
            if self._last is None or now - self._last[0] >= self._every_s:
                self._last = (now, self._check())
            return self._last[1]

    def _check(self) -> DcgmReadings:
        try:
            return DcgmReadings(
                health=run_health(path=self._path, timeout_s=self._timeout_s, host=self._host)
            )
        except DcgmiError as exc:
            log.warning("dcgmi_unavailable", error=str(exc))
            return DcgmReadings(health_error=str(exc))
