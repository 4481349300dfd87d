"""Fixtures for the emulated orchestrators: a running ``KubeSim`` and clients bound to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim


@pytest.fixture
def kube_sim() -> Iterator[KubeSim]:
    """A started emulator with its default controllers, on real time."""
    with running_kube_sim() as sim:
        yield sim


@pytest.fixture
def manual_clock() -> ManualClock:
    """A clock that moves only when the test advances it."""
    return ManualClock()


@pytest.fixture
def bare_kube_sim(manual_clock: ManualClock) -> Iterator[KubeSim]:
    """A started emulator without controllers, on a manual clock: the API server's own behaviour only."""
    with running_kube_sim(clock=manual_clock, controllers=False) as sim:
        yield sim


@pytest.fixture
def api_client(bare_kube_sim: KubeSim) -> Iterator[client.ApiClient]:
    """An official-client ``ApiClient`` for the bare emulator."""
    api = bare_kube_sim.api_client()
    yield api
    api.close()


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    """``CoreV1Api`` against the bare emulator."""
    return client.CoreV1Api(api_client)
