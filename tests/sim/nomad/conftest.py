"""Fixtures for the emulated Nomad API: a small GPU fleet on a manual clock, and job specs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import nomad
import pytest

from core.clock import ManualClock
from sim.nomad.harness import NomadSim, running_nomad_sim


@pytest.fixture
def clock() -> ManualClock:
    """Drain deadlines move only when the test advances this clock."""
    return ManualClock()


@pytest.fixture
def nomad_sim(clock: ManualClock) -> Iterator[NomadSim]:
    """Four 8-GPU nodes, scheduler on, ACLs off."""
    with running_nomad_sim(nodes=4, gpus_per_node=8, clock=clock) as sim:
        yield sim


@pytest.fixture
def api(nomad_sim: NomadSim) -> nomad.Nomad:
    """python-nomad bound to the emulator's server address."""
    return nomad_sim.client()


JobFactory = Callable[..., dict[str, Any]]


def _job(job_id: str, job_type: str, *, count: int = 1, gpus: int = 0, **extra: Any) -> dict[str, Any]:
    """A Nomad JSON job body with one group of ``count`` and one task asking for ``gpus`` nvidia GPUs."""
    task: dict[str, Any] = {"Name": "main", "Driver": "docker", "Config": {"image": "trainer:1"}}
    if gpus:
        task["Resources"] = {"Devices": [{"Name": "nvidia/gpu", "Count": gpus}]}
    group: dict[str, Any] = {"Name": "workers", "Count": count, "Tasks": [task]}
    group.update(extra.pop("group", {}))
    return {"Job": {"ID": job_id, "Type": job_type, "TaskGroups": [group], **extra}}


@pytest.fixture
def make_job() -> JobFactory:
    """``make_job(id, type, count=1, gpus=0, group={...}, **job_fields)`` -> a ``POST /v1/jobs`` body."""
    return _job
