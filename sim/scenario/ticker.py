"""Many agents driven by a few worker threads, for fleets too large for a loop thread per agent.

Each agent is still the real one from ``build_agent``; only who calls its pass changes. ``Agent.run`` gives
every agent a loop thread, a report-sender thread and a node-change relay thread next to its XID watcher:
at a thousand agents in one process that is thousands of threads fighting for one interpreter lock, and
start-up crawls. Here one scheduler thread finds the agents whose interval is due or whose wake event is
set (an XID arrived: the NVML event thread still sets it at once), and a small pool runs their passes and
delivers their reports right after; a pass comes sooner than the interval when the agent asks for it (a
permit the aggregator said to ask for again in a few seconds), as ``Agent.run`` waits. What is lost against
``Agent.run``: a change made by someone else to the node wakes no pass early; the next pass on the
interval sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from agent.loop import Agent

log = structlog.get_logger(__name__)

SCAN_EVERY_S = 0.02  # how soon a woken agent gets its pass
WORKERS = 4  # polled passes are mostly Python: more workers only contend for the interpreter lock
# Passes woken by an XID mostly wait on HTTP (taint, report, permit): a burst on a quarter of a large fleet
# needs many of them in flight at once, on workers of their own so that routine passes never hold them up.
WOKEN_WORKERS = 16


class AgentTicker:
    """Runs the passes of ``agents`` every ``interval_s`` and whenever their wake event is set.

    Woken agents go first, then the most overdue; no more passes are handed out than there are idle
    workers, so a pass woken by an XID never waits behind a queue of routine ones. First passes are spread
    over one interval, so that the fleet's polling does not come in one wave.
    """

    def __init__(
        self,
        agents: list[Agent],
        interval_s: float,
        *,
        workers: int = WORKERS,
        woken_workers: int = WOKEN_WORKERS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._agents = agents
        self._interval_s = interval_s
        self._monotonic = monotonic
        start = monotonic()
        spread = interval_s / max(len(agents), 1)
        self._due = [start + index * spread for index in range(len(agents))]
        self._busy: set[int] = set()
        self._idle = threading.Semaphore(workers)
        self._woken_idle = threading.Semaphore(woken_workers)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(
            max_workers=workers + woken_workers, thread_name_prefix="gpuhealth-ticker"
        )
        self._thread = threading.Thread(target=self._run, name="gpuhealth-ticker-scheduler", daemon=True)

    def start(self) -> AgentTicker:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No new passes; waits for the running ones."""
        self._stop.set()
        self._thread.join(5.0)
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            chosen, woken = self._next()
            if chosen is None:
                self._stop.wait(SCAN_EVERY_S)
                continue
            slots = self._woken_idle if woken else self._idle
            if not slots.acquire(timeout=SCAN_EVERY_S):
                continue
            with self._lock:
                self._busy.add(chosen)
            self._due[chosen] = self._monotonic() + self._interval_s
            self._pool.submit(self._pass, chosen, slots)

    def _next(self) -> tuple[int | None, bool]:
        """A woken agent if any, else the most overdue one, else None (nobody is due); and whether woken."""
        now = self._monotonic()
        overdue: int | None = None
        with self._lock:
            busy = set(self._busy)
        for index, agent in enumerate(self._agents):
            if index in busy:
                continue
            if agent.wake.is_set():
                return index, True
            if self._due[index] <= now and (overdue is None or self._due[index] < self._due[overdue]):
                overdue = index
        return overdue, False

    def _pass(self, index: int, slots: threading.Semaphore) -> None:
        agent = self._agents[index]
        try:
            agent.wake.clear()
            agent.tick()
            if agent.parts.link is not None:
                agent.parts.link.deliver()
        except Exception:
            log.exception("pooled_tick_failed", node=agent.node)
        finally:
            with self._lock:
                # As ``Agent.run`` waits: the interval, or less when the aggregator said when a permit may
                # be granted (a node's first permit waits out the settle time, 15 s, not the interval).
                soon = self._monotonic() + agent.next_wait_s()
                self._due[index] = min(self._due[index], soon)
                self._busy.discard(index)
            slots.release()
