"""Fixtures of the Kubernetes runbook scenarios; the rig itself is ``tests/support/scenario_rig.py`` (its
``KubeGpuNode``: an emulated API server, one GPU node with a fake NVML, and the real agent on it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from scenario_rig import KubeGpuNode

from core.clock import ManualClock
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[KubeSim]:
    """A bare emulated API server (no controllers: nothing but the agent writes) with two GPU nodes."""
    with running_kube_sim(clock=clock, controllers=False, bookmark_interval_s=0.2) as kube:
        build_fleet(kube.store, 2)
        yield kube


@pytest.fixture
def gpu_node(sim: KubeSim, clock: ManualClock, tmp_path: Path) -> Iterator[KubeGpuNode]:
    """``gpu-node-0`` with 8 fake H100s and its agent (started on first use)."""
    node = KubeGpuNode(sim, clock, tmp_path / "state")
    yield node
    node.close()


@pytest.fixture
def human(sim: KubeSim) -> Iterator[client.CoreV1Api]:
    """A person with kubectl: another client of the same API server."""
    api_client = sim.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
