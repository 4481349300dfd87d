"""The Nomad idle check of deep diagnostics, on the emulated Nomad with its scheduler: the node's live
allocations whose tasks hold ``nvidia/gpu`` devices make it busy; CPU-only and finished allocations do not;
a diagnostic that is due is skipped on a busy node and runs on an idle one; the list is read only then."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from repo_paths import FIXTURES
from waiting import HANG_GUARD_S

from agent.backends.dcgm.dcgmi import DiagRun
from agent.backends.dcgm.dcgmi_output import parse_diag
from agent.diagnostics.order import DiagOrder
from agent.diagnostics.runner import DiagnosticsRunner, IdleProbe
from agent.diagnostics.settings import DiagnosticsSettings
from agent.state.machine import DebounceConfig, HealthStateMachine
from core.clock import ManualClock
from core.findings import Verdict
from core.health import NodeHealth, NodeState
from core.snapshot import NodeSnapshot
from remediation.nomad.executor import NomadExecutor
from remediation.nomad.idle import gpu_allocations, is_gpu_device_name
from sim.nomad.harness import NomadSim, running_nomad_sim

PASSED = FIXTURES / "dcgm" / "diag-3.1.0-r1-pass.json"


def task(gpus: int, device: str = "nvidia/gpu") -> dict[str, Any]:
    devices = [{"Name": device, "Count": gpus}] if gpus else []
    return {
        "Name": "main",
        "Driver": "docker",
        "Resources": {"CPU": 100, "MemoryMB": 256, "Devices": devices},
    }


def job(job_id: str, job_type: str, count: int = 1, gpus: int = 0) -> dict[str, Any]:
    group = {"Name": "group", "Count": count, "Tasks": [task(gpus)]}
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]}


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """Two GPU nodes with the scheduler; the agent's system job runs on both (it holds no GPU)."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=True) as nomad:
        nomad.register_job(job("gpuhealth-agent", "system"))
        nomad.wait_placed("gpuhealth-agent", 2, timeout=HANG_GUARD_S)
        yield nomad


def place_training(sim: NomadSim) -> str:
    """A one-node GPU training job; the node it landed on."""
    sim.register_job(job("train", "batch", count=1, gpus=8))
    (alloc,) = sim.wait_placed("train", 1, timeout=HANG_GUARD_S)
    return str(alloc["NodeName"])


def other(sim: NomadSim, node: str) -> str:
    return next(name for name in ("gpu-node-0", "gpu-node-1") if name != node)


def test_the_executor_is_an_idle_probe_and_lists_only_gpu_allocations(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor]
) -> None:
    """The training allocation makes its node busy; the system job's CPU-only allocation does not."""
    busy_node = place_training(sim)
    busy, idle = executor_for(busy_node), executor_for(other(sim, busy_node))

    assert isinstance(busy, IdleProbe)
    assert busy.gpu_pods() == ["default/train.group[0]"]
    assert idle.gpu_pods() == []


def test_gpu_device_names_follow_nomads_forms() -> None:
    assert [
        is_gpu_device_name(n) for n in ("gpu", "nvidia/gpu", "nvidia/gpu/H100", "amd/gpu", "nvidia/fpga")
    ] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_a_job_that_asks_for_gpus_counts_even_before_devices_are_assigned() -> None:
    """A pending allocation whose answer carries no ``AllocatedResources`` devices yet: its job's ask counts."""
    pending = {
        "Namespace": "ml",
        "Name": "train.group[0]",
        "TaskGroup": "group",
        "DesiredStatus": "run",
        "ClientStatus": "pending",
        "Job": {"TaskGroups": [{"Name": "group", "Tasks": [task(2, "nvidia/gpu/H200")]}]},
    }
    cpu_only = {
        **pending,
        "Name": "web.group[0]",
        "Job": {"TaskGroups": [{"Name": "group", "Tasks": [task(0)]}]},
    }
    finished = {**pending, "Name": "old.group[0]", "ClientStatus": "complete"}

    assert gpu_allocations([pending, cpu_only, finished]) == ["ml/train.group[0]"]


# --- the diagnostics runner with the Nomad executor as its probe -------------------------------------------


class CountingProbe:
    """The executor seen by the runner, counting how often the allocations are listed."""

    def __init__(self, executor: NomadExecutor) -> None:
        self.executor = executor
        self.gpu_workload = executor.gpu_workload
        self.reads = 0

    def gpu_pods(self) -> list[str]:
        self.reads += 1
        return self.executor.gpu_pods()


def runner(probe: CountingProbe, clock: ManualClock, node: str) -> DiagnosticsRunner:
    def diag(level: int, timeout_s: float) -> DiagRun:
        return DiagRun(level=level, result=parse_diag(PASSED.read_text()), seconds=1.0)

    settings = DiagnosticsSettings(enabled=False, on_demand=True)
    return DiagnosticsRunner(node, settings, clock=clock, diag=diag, probe=probe)


def healthy_machine(node: str, clock: ManualClock) -> HealthStateMachine:
    machine = HealthStateMachine(node, DebounceConfig(), clock=clock.now)
    machine.observe(Verdict.from_findings(node, []))
    assert machine.health.state is NodeState.HEALTHY
    return machine


def test_an_on_demand_run_is_refused_on_a_busy_nomad_node_naming_the_allocation(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor], clock: ManualClock
) -> None:
    busy_node = place_training(sim)
    probe = CountingProbe(executor_for(busy_node))
    diagnostics = runner(probe, clock, busy_node)
    diagnostics.request(DiagOrder(level=1, requested_by="alice"))
    snapshot = NodeSnapshot(node=busy_node, gpus=[])

    health: NodeHealth = diagnostics.prepare(healthy_machine(busy_node, clock), snapshot, dry_run=False)

    assert health.state is not NodeState.TESTING and not diagnostics.running
    (note,) = diagnostics.news()
    assert "busy: 1 allocation(s) use the GPUs: default/train.group[0]" in note.message
    assert probe.reads == 1


def test_an_on_demand_run_starts_on_an_idle_nomad_node_and_the_list_is_read_once(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor], clock: ManualClock
) -> None:
    busy_node = place_training(sim)
    idle_node = other(sim, busy_node)
    probe = CountingProbe(executor_for(idle_node))
    diagnostics = runner(probe, clock, idle_node)
    machine = healthy_machine(idle_node, clock)
    snapshot = NodeSnapshot(node=idle_node, gpus=[])

    diagnostics.prepare(machine, snapshot, dry_run=False)  # nothing due: nothing read
    assert probe.reads == 0
    diagnostics.request(DiagOrder(level=1, requested_by="alice"))
    health = diagnostics.prepare(machine, snapshot, dry_run=False)

    assert health.state is NodeState.TESTING and diagnostics.running
    assert probe.reads == 1
