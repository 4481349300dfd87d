"""Drain and requeue on the emulated Nomad with its scheduler running: the batch training job restarts once,
off the drained node; system jobs stay; release undoes only what we did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from waiting import HANG_GUARD_S, wait_until

from core.clock import ManualClock
from core.steps import Drain, RemoveTaint, SetIncidentAnnotation, SetTaint
from remediation.nomad.drain import NomadDrainSetup
from remediation.nomad.executor import NomadExecutor
from sim.nomad.harness import NomadSim, running_nomad_sim

INCIDENT = "inc-gpu-node-0-1"
DEADLINE_S = 600.0
FAST = NomadDrainSetup(poll_interval_s=0.02)


def gpu_task(gpus: int) -> dict[str, Any]:
    devices = [{"Name": "nvidia/gpu", "Count": gpus}] if gpus else []
    return {
        "Name": "main",
        "Driver": "docker",
        "Resources": {"CPU": 100, "MemoryMB": 256, "Devices": devices},
    }


def job(job_id: str, job_type: str, count: int = 1, gpus: int = 0) -> dict[str, Any]:
    group = {"Name": "group", "Count": count, "Tasks": [gpu_task(gpus)]}
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]}


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """Six GPU nodes and the scheduler: a 4-node batch training job, a service and a system job."""
    with running_nomad_sim(nodes=6, clock=clock, controllers=True) as nomad:
        nomad.register_job(job("train", "batch", count=4, gpus=8))
        nomad.wait_placed("train", 4, timeout=HANG_GUARD_S)
        nomad.register_job(job("web", "service"))
        nomad.wait_placed("web", 1, timeout=HANG_GUARD_S)
        nomad.register_job(job("gpuhealth-agent", "system"))
        nomad.wait_placed("gpuhealth-agent", 6, timeout=HANG_GUARD_S)
        yield nomad


def live_ids(sim: NomadSim, job_id: str) -> set[str]:
    return {alloc["ID"] for alloc in sim.live_allocations(job_id)}


def bad_node(sim: NomadSim) -> str:
    """The node that runs the first allocation of the training job."""
    return str(sim.live_allocations("train")[0]["NodeName"])


def test_drain_requeues_the_batch_job_once_and_keeps_system_jobs(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor]
) -> None:
    """Drain: deadline and IgnoreSystemJobs sent, Meta names the incident; every allocation of the training
    job is stopped once and placed again off the node; the agent's system allocation stays; the news
    reports the requeue then the drain's outcome."""
    node = bad_node(sim)
    executor = executor_for(node, drain=FAST)
    train_before, agent_before = live_ids(sim, "train"), live_ids(sim, "gpuhealth-agent")

    report = executor.apply([SetTaint("reboot"), Drain(INCIDENT, DEADLINE_S)])

    assert [r.detail for r in report.results][1] == "drain started"
    assert executor.wait_for_drain(HANG_GUARD_S), "the drain did not end"
    news = executor.drain_updates()
    assert [(n.requeue, n.ok) for n in news] == [(True, True), (False, True)]
    assert "default/train: requeued (4 allocations stopped)" in news[0].detail
    assert news[1].detail.startswith("drain complete")
    node_object = sim.state.node(node)
    assert node_object["LastDrain"]["Meta"]["gpuhealth.incident"] == INCIDENT
    assert node_object["Meta"]["gpuhealth.drained"] == INCIDENT
    assert node_object["Meta"]["gpuhealth.requeued"] == INCIDENT

    wait_until(lambda: len(sim.live_allocations("train")) == 4, message="the training job placed again")
    assert not train_before & live_ids(sim, "train")  # every member restarted
    assert all(alloc["NodeName"] != node for alloc in sim.live_allocations("train"))
    assert agent_before == live_ids(sim, "gpuhealth-agent")  # the system job survived its own drain
    assert executor.facts().drained_incident == INCIDENT
    assert executor.facts().drain_finished_incident == INCIDENT


def test_the_same_incident_is_never_drained_or_requeued_twice(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor]
) -> None:
    """A second Drain for the incident (same agent, or a restarted one) stops no allocation again."""
    node = bad_node(sim)
    first = executor_for(node, drain=FAST)
    first.apply([Drain(INCIDENT, DEADLINE_S)])
    assert first.wait_for_drain(HANG_GUARD_S)
    wait_until(lambda: len(sim.live_allocations("train")) == 4, message="the training job placed again")
    restarted = live_ids(sim, "train")

    again = first.apply([Drain(INCIDENT, DEADLINE_S)])
    second = executor_for(node, drain=FAST)
    assert second.facts().drained_incident == INCIDENT  # the planner would not plan it
    second.apply([Drain(INCIDENT, DEADLINE_S)])
    assert second.wait_for_drain(HANG_GUARD_S)

    assert again.results[0].detail.startswith(f"drain for {INCIDENT} already")
    assert [n.detail for n in second.drain_updates() if n.requeue] == []
    assert live_ids(sim, "train") == restarted


def test_release_cancels_our_drain_and_restores_eligibility_and_metadata(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor]
) -> None:
    """The incident closes while our drain still runs (the requeue is limited to another namespace, so the
    training allocation keeps the drain waiting for its deadline): the drain is cancelled, the node
    eligible again, and the incident's keys are gone."""
    node = bad_node(sim)
    executor = executor_for(node, drain=NomadDrainSetup(namespace="elsewhere", poll_interval_s=0.02))
    executor.apply([SetTaint("reboot"), SetIncidentAnnotation(INCIDENT)])
    executor.apply([Drain(INCIDENT, DEADLINE_S)])
    wait_until(lambda: sim.state.node(node)["DrainStrategy"] is not None, message="the drain to start")

    report = executor.apply([RemoveTaint(), SetIncidentAnnotation(None)])

    assert all(r.ok for r in report.results), report.results
    node_object = sim.state.node(node)
    assert node_object["DrainStrategy"] is None and node_object["LastDrain"]["Status"] == "canceled"
    assert node_object["SchedulingEligibility"] == "eligible"
    assert not [key for key in node_object["Meta"] if key.startswith("gpuhealth.")]
    assert executor.wait_for_drain(HANG_GUARD_S)
    outcome = [n for n in executor.drain_updates() if not n.requeue]
    assert [(n.ok, n.detail.split(" in ")[0]) for n in outcome] == [(False, "drain cancelled")]
