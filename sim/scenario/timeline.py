"""The timeline's atomic actions (each play of an injection, each repair) and the fault-to-taint probe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.scenario.model import Injection
from sim.scenario.orchestrator import Orchestrator
from sim.scenario.summary import FaultLatency

PROBE_POLL_S = 0.02


@dataclass(order=True)
class Action:
    """Something to do at ``at`` seconds into the timeline."""

    at: float
    order: int
    injection: Injection = field(compare=False)
    play: int = field(compare=False)  # which play of a repeated injection (0: the first)
    repair: bool = field(compare=False, default=False)


def expand(timeline: list[Injection]) -> list[Action]:
    """Every play and repair, in time order (file order breaks ties)."""
    actions: list[Action] = []
    for injection in timeline:
        plays = injection.repeat.times if injection.repeat else 1
        every = injection.repeat.every if injection.repeat else 0.0
        for play in range(plays):
            at = injection.at + play * every
            actions.append(Action(at, len(actions), injection, play))
            if injection.clear_after is not None:
                actions.append(Action(at + injection.clear_after, len(actions), injection, play, repair=True))
    return sorted(actions)


class TaintProbe:
    """Times each injected fault until our taint shows on its node, polling the orchestrator closely."""

    def __init__(self, orchestrator: Orchestrator, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._orchestrator = orchestrator
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], float] = {}
        self._done: list[FaultLatency] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuhealth-taint-probe", daemon=True)

    def start(self) -> TaintProbe:
        self._thread.start()
        return self

    def watch(self, injection: str, node: str, injected_at: float) -> None:
        """Time ``node`` from ``injected_at``; a node already tainted is not timed (nothing to measure)."""
        if self._orchestrator.node(node).taint is not None:
            return
        with self._lock:
            self._pending.setdefault((injection, node), injected_at)

    def stop(self) -> list[FaultLatency]:
        """End the probe; faults that never tainted their node are reported with ``seconds`` None."""
        self._stop.set()
        self._thread.join(2.0)
        with self._lock:
            never = [FaultLatency(injection=i, node=n, seconds=None) for (i, n) in self._pending]
            self._pending.clear()
            return [*self._done, *never]

    def _run(self) -> None:
        while not self._stop.wait(PROBE_POLL_S):
            with self._lock:
                pending = list(self._pending.items())
            tainted = self._tainted({node for (_, node), _ in pending})
            for (injection, node), started in pending:
                if node in tainted:
                    seconds = round(self._monotonic() - started, 3)
                    with self._lock:
                        self._pending.pop((injection, node), None)
                        self._done.append(FaultLatency(injection=injection, node=node, seconds=seconds))

    def _tainted(self, nodes: set[str]) -> set[str]:
        """Which of ``nodes`` carry our taint. Only the watched nodes are read, and only their taints: the
        probe polls fifty times a second while a burst is pending, and reading the whole fleet (its
        workloads too) each time cost the process the emulator and the aggregator run in more CPU than
        the burst it measured."""
        return self._orchestrator.tainted(nodes)
