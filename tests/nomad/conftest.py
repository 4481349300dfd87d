"""Fixtures of the Nomad executor tests: an emulated Nomad (``sim/nomad``) over real HTTP, and executors on
its nodes, each talking to its node's local client agent the way the agent does on a Nomad client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from waiting import HANG_GUARD_S

from core.clock import ManualClock
from remediation.nomad.connect import connect_nomad_executor
from remediation.nomad.executor import NomadExecutor
from remediation.nomad.settings import NomadRetrySettings, NomadSettings
from sim.nomad.harness import NomadSim, running_nomad_sim

NODE = "gpu-node-0"
ExecutorFactory = Callable[..., NomadExecutor]


class ClockSleep:
    """The executor's retry sleep: records each wait and moves the manual clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """Two GPU nodes, no scheduler: nothing but the executor writes."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=False) as nomad:
        yield nomad


@pytest.fixture
def executor_for(sim: NomadSim, clock: ManualClock) -> Iterator[ExecutorFactory]:
    """Executors for ``sim``'s nodes (the local client agent of ``node``), closed at the end."""
    made: list[NomadExecutor] = []

    def make(node: str = NODE, *, token: str | None = None, **options: Any) -> NomadExecutor:
        settings = NomadSettings(
            address=sim.client_address(node),
            watch_wait_s=0.2,  # short long-polls: a closed executor leaves nothing waiting for long
            retry=NomadRetrySettings(attempts=4, initial_wait_s=0.5, deadline_s=10.0),
            **options.pop("settings", {}),
        )
        environ = {"NOMAD_TOKEN": token} if token else {}
        executor = connect_nomad_executor(
            settings,
            environ=environ,
            sleep=options.pop("sleep", ClockSleep(clock)),
            monotonic=clock.monotonic,
            **options,
        )
        made.append(executor)
        assert executor.wait_synced(HANG_GUARD_S), "the node watch never answered"
        return executor

    yield make
    for executor in made:
        executor.close()


@pytest.fixture
def executor(executor_for: ExecutorFactory) -> NomadExecutor:
    return executor_for()


class NodeView:
    """What the emulated Nomad holds about one node (read from its store, not through the API)."""

    def __init__(self, sim: NomadSim, name: str = NODE) -> None:
        self.sim = sim
        self.name = name

    @property
    def id(self) -> str:
        return self.sim.node_id(self.name)

    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = self.sim.state.node(self.name)
        return node

    def meta(self) -> dict[str, str]:
        return dict(self.node()["Meta"])

    def ours(self) -> dict[str, str]:
        """Only the gpuhealth.* metadata keys."""
        return {k: v for k, v in self.meta().items() if k.startswith("gpuhealth.")}

    def eligibility(self) -> str:
        return str(self.node()["SchedulingEligibility"])


@pytest.fixture
def view(sim: NomadSim) -> NodeView:
    """gpu-node-0 as the emulator holds it."""
    return NodeView(sim)
