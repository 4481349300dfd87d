"""Fixtures of the Nomad runbook scenarios; the rig itself is ``tests/support/scenario_rig.py`` (its
``NomadGpuNode``: an emulated Nomad, ``sim/nomad``, one GPU node with a fake NVML, and the real agent on it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scenario_rig import NomadGpuNode

from core.clock import ManualClock
from sim.nomad.harness import NomadSim, running_nomad_sim


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """A bare emulated Nomad (no scheduler: nothing but the agent writes) with two GPU nodes."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=False) as nomad:
        yield nomad


@pytest.fixture
def gpu_node(sim: NomadSim, clock: ManualClock, tmp_path: Path) -> Iterator[NomadGpuNode]:
    """``gpu-node-0`` with 8 fake H100s and its agent (started on first use)."""
    node = NomadGpuNode(sim, clock, tmp_path / "state")
    yield node
    node.close()
