"""Fixtures for the Kubernetes executor tests: an emulated API server on a manual clock, GPU nodes, and
executors whose sleeps move that clock (time passes only when someone waits, so retries cost no real time)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from waiting import HANG_GUARD_S

from core.clock import ManualClock
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim

NODE = "gpu-node-0"
OTHER_NODE = "gpu-node-1"


class ClockSleep:
    """The executor's injected ``sleep``: records each wait and moves the emulator's clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


@pytest.fixture
def clock() -> ManualClock:
    """The one clock of the emulator and of the executors."""
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[KubeSim]:
    """A bare emulated API server (no controllers) with two GPU-operator-shaped nodes."""
    with running_kube_sim(clock=clock, controllers=False, bookmark_interval_s=0.2) as kube:
        build_fleet(kube.store, 2)
        yield kube


@pytest.fixture
def sleep(clock: ManualClock) -> ClockSleep:
    """Waits the executor asks for, applied to the manual clock."""
    return ClockSleep(clock)


@pytest.fixture
def human(sim: KubeSim) -> Iterator[client.CoreV1Api]:
    """Another client, standing for a person with kubectl or another controller."""
    api_client = sim.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def make_executor(
    sim: KubeSim, clock: ManualClock, sleep: ClockSleep
) -> Iterator[Callable[..., KubernetesExecutor]]:
    """Build executors for ``NODE`` (or ``node=``) against the emulator; closed at the end of the test."""
    created: list[KubernetesExecutor] = []
    clients: list[client.ApiClient] = []

    def build(node: str = NODE, **kwargs: Any) -> KubernetesExecutor:
        api_client = sim.api_client()
        clients.append(api_client)
        kwargs.setdefault("clock", clock.now)
        kwargs.setdefault("sleep", sleep)
        kwargs.setdefault(
            "retry", RetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0)
        )
        executor = KubernetesExecutor(api_client, node, **kwargs)
        created.append(executor)
        if kwargs.get("watch", True):
            assert executor.wait_synced(HANG_GUARD_S), "the watch never listed the node"
        return executor

    yield build
    for executor in created:
        executor.close()
    for api_client in clients:
        api_client.close()


@pytest.fixture
def executor(make_executor: Callable[..., KubernetesExecutor]) -> KubernetesExecutor:
    """The executor of ``NODE`` with its watch running."""
    return make_executor()


@pytest.fixture
def stored_node(sim: KubeSim) -> Callable[..., dict[str, Any]]:
    """Read a node straight from the emulator's store (what the API server holds), default ``NODE``."""

    def read(name: str = NODE) -> dict[str, Any]:
        node = sim.store.get("nodes", None, name)
        assert node is not None
        return node

    return read


@pytest.fixture
def node_events(sim: KubeSim) -> Callable[..., list[dict[str, Any]]]:
    """The Events in ``default`` about a node, default ``NODE``."""

    def events(name: str = NODE) -> list[dict[str, Any]]:
        return [
            event
            for event in sim.store.list("events", "default")
            if event.get("involvedObject", {}).get("name") == name
        ]

    return events
