"""Waiting in tests (import it as ``waiting``): one polling helper and the hang guards every test uses.

A hang guard bounds how long a test waits for something that normally happens within milliseconds (a thread
to run, an event to cross threads, a watch to see a change, a scheduler on real time to place pods). It is
not a timing: a correct program never comes near it, so it is generous, and a test that reaches it fails
(instead of hanging until pytest's own timeout) with a message saying what never happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

HANG_GUARD_S = 20.0
"""The bound for anything in-process: threads, events, watches, emulated schedulers and drains, and a short
Python child process (a fake ``dcgmi`` or reset command). 20 s covers a loaded 2-core CI runner with room to
spare; where a test also uses it as a configured deadline (a drain or reset timeout), that deadline is meant
never to be reached."""

SLOW_HANG_GUARD_S = 90.0
"""The bound for what waits on a new Python process that imports the package: the aggregator served by
``gpuhealth aggregator`` (its imports, then its Alembic migrations, on SQLite or PostgreSQL), the agent or
the emulator started as ``python -m gpuhealth.cli.main ...``. A start takes about a second alone; the
imports of the Kubernetes client, FastAPI, SQLAlchemy and pydantic can take tens of seconds on a loaded CI
host running the suite on every core, which an in-process guard would mistake for a hang. The diagnostics
runner's unit tests use it too: their waits on fake ``dcgmi`` runs always had a bound above ``HANG_GUARD_S``
(30 s), kept at least as large."""

POLL_INTERVAL_S = 0.01
"""How often ``wait_until`` asks by default: short enough to add no noticeable latency, long enough to leave
the CPU to the threads being waited for."""


def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float = HANG_GUARD_S,
    interval: float = POLL_INTERVAL_S,
    message: str | None = None,
) -> bool:
    """Poll ``predicate`` every ``interval`` seconds until it is true; ``True`` as soon as it is.

    After ``timeout`` seconds it is asked one last time; if still false: with a ``message``, raises
    ``AssertionError("timed out after <timeout> s waiting for <message>")``; without one, returns ``False``,
    for ``assert wait_until(...), "what never happened"``.

    The pauses are ``Event.wait``, not ``time.sleep``, so a test that patches ``time.sleep`` does not change
    how this helper waits.
    """
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        pause.wait(interval)
    if predicate():
        return True
    if message is not None:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
    return False
