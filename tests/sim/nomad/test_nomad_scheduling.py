"""Jobs, placement and allocation stop: devices, constraints, eligibility and replacements.

Pages cited: developer.hashicorp.com/nomad/api-docs/jobs ("Create Job", "List Job Allocations"),
/api-docs/allocations ("Stop Allocation", "Read Allocation"), /docs/job-specification/constraint,
/docs/job-specification/device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import nomad
import pytest
from nomad.api.exceptions import BadRequestNomadException, URLNotFoundNomadException

from sim.nomad.harness import NomadSim

JobFactory = Callable[..., dict[str, Any]]
HEALTHY_ONLY = [{"LTarget": "${meta.gpuhealth.state}", "RTarget": "healthy", "Operand": "="}]


def _mark(sim: NomadSim, node: str, state: str) -> None:
    reply = httpx.post(
        f"{sim.client_address(node)}/v1/client/metadata", json={"Meta": {"gpuhealth.state": state}}
    )
    reply.raise_for_status()


def test_register_job_answers_like_nomad_and_places_device_counts(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """api-docs/jobs "Create Job": the answer has EvalID, EvalCreateIndex, JobModifyIndex; the device block
    reserves Count GPU instances per allocation (job-specification/device)."""
    answer = api.jobs.register_job(make_job("train", "batch", count=2, gpus=4))
    assert set(answer) >= {"EvalID", "EvalCreateIndex", "JobModifyIndex", "Index"}
    allocs = nomad_sim.wait_placed("train", 2)
    for alloc in allocs:
        devices = api.allocation.get_allocation(alloc["ID"])["AllocatedResources"]["Tasks"]["main"]["Devices"]
        assert devices[0]["Vendor"] == "nvidia"
        assert len(devices[0]["DeviceIDs"]) == 4
    held = [i for a in allocs for i in a["AllocatedResources"]["Tasks"]["main"]["Devices"][0]["DeviceIDs"]]
    assert len(set(held)) == 8  # no instance is handed out twice
    assert api.job.get_job("train")["Status"] == "running"


def test_allocations_never_exceed_free_gpus(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """Five 8-GPU allocations on four 8-GPU nodes: four are placed, the fifth waits (blocked evaluation)."""
    api.jobs.register_job(make_job("big", "batch", count=5, gpus=8))
    placed = nomad_sim.wait_placed("big", 4)
    assert len({a["NodeID"] for a in placed}) == 4
    with pytest.raises(TimeoutError):
        nomad_sim.wait_placed("big", 5, timeout=0.3)


def test_stopped_batch_allocation_is_replaced_on_another_eligible_node(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """api-docs/allocations "Stop Allocation": the allocation stops and the scheduler places a replacement
    (PreviousAllocation set, the old one's NextAllocation set) on an eligible node with free GPUs, never on
    an ineligible one."""
    api.jobs.register_job(make_job("train", "batch", count=1, gpus=8))
    first = nomad_sim.wait_placed("train", 1)[0]
    for name in ("gpu-node-1", "gpu-node-2"):
        api.node.eligible_node(nomad_sim.node_id(name), ineligible=True)
    answer = api.allocation.stop_allocation(first["ID"])
    assert set(answer) >= {"EvalID", "Index"}
    nomad_sim.wait_for(lambda: any(a["ID"] != first["ID"] for a in nomad_sim.live_allocations("train")))
    replacement = nomad_sim.live_allocations("train")[0]
    assert replacement["PreviousAllocation"] == first["ID"]
    assert replacement["NodeName"] not in (first["NodeName"], "gpu-node-1", "gpu-node-2")
    old = api.allocation.get_allocation(first["ID"])
    assert (old["DesiredStatus"], old["ClientStatus"]) == ("stop", "complete")
    assert old["NextAllocation"] == replacement["ID"]


def test_replacement_waits_when_no_eligible_node_has_free_gpus(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """With every other node ineligible the replacement goes back to the only eligible node (the
    previous one), and when that one is ineligible too it is not placed at all."""
    api.jobs.register_job(make_job("train", "batch", count=1, gpus=8))
    first = nomad_sim.wait_placed("train", 1)[0]
    for node in nomad_sim.state.nodes():
        if node["ID"] != first["NodeID"]:
            api.node.eligible_node(node["ID"], ineligible=True)
    api.node.eligible_node(first["NodeID"], ineligible=True)
    api.allocation.stop_allocation(first["ID"])
    with pytest.raises(TimeoutError):
        nomad_sim.wait_placed("train", 1, timeout=0.3)
    api.node.eligible_node(first["NodeID"], eligible=True)
    assert nomad_sim.wait_placed("train", 1)[0]["NodeID"] == first["NodeID"]


def test_meta_constraint_keeps_jobs_off_nodes_marked_unhealthy(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """job-specification/constraint on ``${meta.gpuhealth.state}`` = healthy: nodes whose dynamic metadata
    says otherwise (or is unset) get no allocation."""
    for name in ("gpu-node-0", "gpu-node-1", "gpu-node-2"):
        _mark(nomad_sim, name, "healthy")
    _mark(nomad_sim, "gpu-node-1", "unhealthy")
    api.jobs.register_job(make_job("train", "batch", count=3, gpus=8, Constraints=HEALTHY_ONLY))
    placed = nomad_sim.wait_placed("train", 2)
    assert sorted(a["NodeName"] for a in placed) == ["gpu-node-0", "gpu-node-2"]
    with pytest.raises(TimeoutError):
        nomad_sim.wait_placed("train", 3, timeout=0.3)
    _mark(nomad_sim, "gpu-node-1", "healthy")
    assert "gpu-node-1" in [a["NodeName"] for a in nomad_sim.wait_placed("train", 3)]


def test_device_constraints_and_distinct_hosts(nomad_sim: NomadSim, api: nomad.Nomad) -> None:
    """job-specification/device: constraints on ``${device.attr.memory}`` select device groups;
    ``distinct_hosts`` puts each allocation of the group on its own node."""
    too_big = {"LTarget": "${device.attr.memory}", "RTarget": "100 GiB", "Operand": ">="}
    fits = {"LTarget": "${device.attr.memory}", "RTarget": "40000", "Operand": ">="}

    def spec(job_id: str, constraint: dict[str, str]) -> dict[str, Any]:
        device = {"Name": "nvidia/gpu", "Count": 1, "Constraints": [constraint]}
        task = {"Name": "main", "Resources": {"Devices": [device]}}
        group = {
            "Name": "g",
            "Count": 3,
            "Constraints": [{"Operand": "distinct_hosts", "RTarget": "true"}],
            "Tasks": [task],
        }
        return {"Job": {"ID": job_id, "Type": "batch", "TaskGroups": [group]}}

    api.jobs.register_job(spec("spread", fits))
    api.jobs.register_job(spec("never", too_big))
    placed = nomad_sim.wait_placed("spread", 3)
    assert len({a["NodeID"] for a in placed}) == 3
    with pytest.raises(TimeoutError):
        nomad_sim.wait_placed("never", 1, timeout=0.3)


def test_system_job_runs_once_per_eligible_node(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """A system job places one allocation on every eligible node; a node made eligible later gets one."""
    api.node.eligible_node(nomad_sim.node_id("gpu-node-3"), ineligible=True)
    api.jobs.register_job(make_job("gpuhealth", "system"))
    placed = nomad_sim.wait_placed("gpuhealth", 3)
    assert "gpu-node-3" not in [a["NodeName"] for a in placed]
    api.node.eligible_node(nomad_sim.node_id("gpu-node-3"), eligible=True)
    assert len(nomad_sim.wait_placed("gpuhealth", 4)) == 4


def test_job_allocations_and_node_allocations_endpoints(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """api-docs/jobs "List Job Allocations" returns stubs (no Job); api-docs/nodes "Read Node Allocations"
    returns full allocations (with Job)."""
    api.jobs.register_job(make_job("train", "batch", gpus=8))
    alloc = nomad_sim.wait_placed("train", 1)[0]
    stubs = api.job.get_allocations("train")
    assert [s["ID"] for s in stubs] == [alloc["ID"]]
    assert "Job" not in stubs[0]
    on_node = api.node.get_allocations(alloc["NodeID"])
    assert on_node[0]["Job"]["ID"] == "train"
    assert [a["ID"] for a in api.allocations.get_allocations()] == [alloc["ID"]]


def test_deregister_stops_allocations(nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory) -> None:
    """api-docs/jobs "Stop a Job": allocations stop and are not replaced; the job is dead."""
    api.jobs.register_job(make_job("train", "batch", count=2, gpus=8))
    nomad_sim.wait_placed("train", 2)
    api.job.deregister_job("train")
    assert nomad_sim.live_allocations("train") == []
    assert api.job.get_job("train")["Status"] == "dead"


def test_invalid_job_specs_are_400_and_unknown_ids_404(api: nomad.Nomad) -> None:
    """api-docs/jobs: a job without task groups or of an unknown type is refused; unknown jobs and
    allocations are 404."""
    with pytest.raises(BadRequestNomadException):
        api.jobs.register_job({"Job": {"ID": "x", "Type": "batch", "TaskGroups": []}})
    with pytest.raises(BadRequestNomadException):
        api.jobs.register_job(
            {"Job": {"ID": "x", "Type": "cron", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t"}]}]}}
        )
    with pytest.raises(URLNotFoundNomadException):
        api.job.get_job("missing")
    with pytest.raises(URLNotFoundNomadException):
        api.allocation.stop_allocation("00000000-0000-0000-0000-000000000000")


def test_reregistering_a_changed_batch_job_runs_its_ended_slots_again(
    nomad_sim: NomadSim, api: nomad.Nomad, make_job: JobFactory
) -> None:
    """A new job version places fresh allocations where the old ones ended for good (here: deregistered);
    re-registering the unchanged spec keeps the version."""
    api.jobs.register_job(make_job("train", "batch", count=2, gpus=8))
    first = nomad_sim.wait_placed("train", 2)
    api.jobs.register_job(make_job("train", "batch", count=2, gpus=8))
    assert api.job.get_job("train")["Version"] == 0
    api.job.deregister_job("train")
    api.jobs.register_job(make_job("train", "batch", count=2, gpus=8, Meta={"restart": "1"}))
    again = nomad_sim.wait_placed("train", 2)
    assert {a["ID"] for a in again}.isdisjoint({a["ID"] for a in first})
    assert api.job.get_job("train")["Version"] == 1
