"""Fixtures of the runbook scenarios; the rig itself is ``scenario_rig.py`` (see its docstring).

The suite runs with ``--import-mode=importlib``, under which test modules cannot import their siblings: the
rig is loaded once here (conftest files load before the modules they serve) and registered by name.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from sim.clock import ManualClock
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim

_NAME = "scenario_rig"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name(f"{_NAME}.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)

from scenario_rig import GpuNode  # noqa: E402 - registered just above


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[KubeSim]:
    """A bare emulated API server (no controllers: nothing but the agent writes) with two GPU nodes."""
    with running_kube_sim(clock=clock, controllers=False, bookmark_interval_s=0.2) as kube:
        build_fleet(kube.store, 2)
        yield kube


@pytest.fixture
def gpu_node(sim: KubeSim, clock: ManualClock, tmp_path: Path) -> Iterator[GpuNode]:
    """``gpu-node-0`` with 8 fake H100s and its agent (started on first use)."""
    node = GpuNode(sim, clock, tmp_path / "state")
    yield node
    node.close()


@pytest.fixture
def human(sim: KubeSim) -> Iterator[client.CoreV1Api]:
    """A person with kubectl: another client of the same API server."""
    api_client = sim.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
