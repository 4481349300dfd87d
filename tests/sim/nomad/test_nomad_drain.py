"""Node drain as Nomad documents it: per job type, deadline, IgnoreSystemJobs, Meta, completion, cancel.

Pages cited: developer.hashicorp.com/nomad/api-docs/nodes ("Drain Node"), /commands/node/drain (how each
job type's allocations are drained).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import nomad
import pytest

from core.clock import ManualClock
from sim.nomad.harness import NomadSim

HOUR_NS = 3_600_000_000_000


@pytest.fixture
def busy_node(nomad_sim: NomadSim, api: nomad.Nomad, make_job: Callable[..., dict[str, Any]]) -> str:
    """gpu-node-0 runs one service, one 8-GPU batch and one system allocation; returns its ID."""
    factory = make_job
    node_name = "gpu-node-0"
    pin = [{"LTarget": "${node.unique.name}", "RTarget": node_name, "Operand": "="}]
    api.jobs.register_job(factory("web", "service", group={"Constraints": pin}))
    api.jobs.register_job(factory("train", "batch", gpus=8, group={"Constraints": pin}))
    api.jobs.register_job(factory("gpuhealth", "system"))
    nomad_sim.wait_placed("web", 1)
    nomad_sim.wait_placed("train", 1)
    nomad_sim.wait_placed("gpuhealth", 4)
    # A new version without the pin: replacements may go anywhere, the placed allocations stay.
    api.job.register_job("web", factory("web", "service"))
    api.job.register_job("train", factory("train", "batch", gpus=8))
    return nomad_sim.node_id(node_name)


def _live_on(sim: NomadSim, job_id: str) -> list[str]:
    return [a["NodeName"] for a in sim.live_allocations(job_id)]


def test_drain_migrates_service_leaves_batch_and_keeps_system(
    nomad_sim: NomadSim, api: nomad.Nomad, busy_node: str
) -> None:
    """commands/node/drain: service allocations migrate at once, batch allocations wait for the deadline
    and are not replaced, system allocations stay with IgnoreSystemJobs; the node turns ineligible."""
    api.node.drain_node_with_spec(busy_node, {"Deadline": HOUR_NS, "IgnoreSystemJobs": True})
    nomad_sim.wait_for(lambda: _live_on(nomad_sim, "web") not in ([], ["gpu-node-0"]))
    node = api.node.get_node(busy_node)
    assert node["SchedulingEligibility"] == "ineligible"
    assert node["DrainStrategy"]["Deadline"] == HOUR_NS
    assert node["DrainStrategy"]["IgnoreSystemJobs"] is True
    assert _live_on(nomad_sim, "train") == ["gpu-node-0"]
    assert "gpu-node-0" in _live_on(nomad_sim, "gpuhealth")
    stopped_web = [a for a in nomad_sim.state.allocations(job_id="web") if a["DesiredStatus"] == "stop"]
    assert stopped_web[0]["DesiredTransition"]["Migrate"] is True
    replacement = next(a for a in nomad_sim.live_allocations("web"))
    assert replacement["PreviousAllocation"] == stopped_web[0]["ID"]


def test_drain_deadline_stops_batch_without_replacement_and_completes(
    nomad_sim: NomadSim, api: nomad.Nomad, busy_node: str, clock: ManualClock
) -> None:
    """api-docs/nodes: at the deadline remaining allocations are stopped; batch ones are not replaced;
    the drain completes (DrainStrategy null, LastDrain complete, node event) and the node stays ineligible."""
    api.node.drain_node_with_spec(busy_node, {"Deadline": 60_000_000_000, "IgnoreSystemJobs": True})
    nomad_sim.wait_for(lambda: "gpu-node-0" not in _live_on(nomad_sim, "web"))
    assert api.node.get_node(busy_node)["DrainStrategy"] is not None  # the batch allocation holds it open
    clock.advance(61)
    nomad_sim.wait_for(lambda: nomad_sim.state.node(busy_node)["DrainStrategy"] is None)
    node = api.node.get_node(busy_node)
    assert node["LastDrain"]["Status"] == "complete"
    assert node["Events"][-1]["Message"] == "Node drain complete"
    assert node["SchedulingEligibility"] == "ineligible"
    assert _live_on(nomad_sim, "train") == []
    assert "gpu-node-0" in _live_on(nomad_sim, "gpuhealth")


def test_drain_without_ignore_system_jobs_stops_system_allocations_last(
    nomad_sim: NomadSim, api: nomad.Nomad, busy_node: str, clock: ManualClock
) -> None:
    """commands/node/drain: system allocations are drained last and not replaced."""
    api.node.drain_node_with_spec(busy_node, {"Deadline": 60_000_000_000, "IgnoreSystemJobs": False})
    nomad_sim.wait_for(lambda: "gpu-node-0" not in _live_on(nomad_sim, "web"))
    assert "gpu-node-0" in _live_on(nomad_sim, "gpuhealth")  # batch still running: system not yet
    clock.advance(61)
    nomad_sim.wait_for(lambda: nomad_sim.state.node(busy_node)["DrainStrategy"] is None)
    assert "gpu-node-0" not in _live_on(nomad_sim, "gpuhealth")
    assert len(_live_on(nomad_sim, "gpuhealth")) == 3


def test_drain_meta_is_recorded_in_last_drain(nomad_sim: NomadSim, busy_node: str) -> None:
    """api-docs/nodes "Drain Node": ``Meta`` of the request is kept in the node's LastDrain.Meta (raw
    request: python-nomad's drain_node_with_spec has no Meta argument)."""
    body = {
        "DrainSpec": {"Deadline": HOUR_NS, "IgnoreSystemJobs": True},
        "Meta": {"message": "XID 79", "gpuhealth.incident": "inc-1"},
    }
    answer = httpx.post(f"{nomad_sim.address}/v1/node/{busy_node}/drain", json=body)
    assert answer.status_code == 200
    assert set(answer.json()) >= {"EvalIDs", "EvalCreateIndex", "NodeModifyIndex", "Index"}
    last = nomad_sim.state.node(busy_node)["LastDrain"]
    assert last["Status"] == "draining"
    assert last["Meta"] == {"message": "XID 79", "gpuhealth.incident": "inc-1"}


def test_cancel_drain_with_null_spec_and_mark_eligible(
    nomad_sim: NomadSim, api: nomad.Nomad, busy_node: str
) -> None:
    """api-docs/nodes: DrainSpec null cancels the drain; MarkEligible makes the node eligible again;
    the batch allocation that was left running keeps running."""
    api.node.drain_node_with_spec(busy_node, {"Deadline": HOUR_NS, "IgnoreSystemJobs": True})
    api.node.drain_node_with_spec(busy_node, None, mark_eligible=True)
    node = api.node.get_node(busy_node)
    assert node["DrainStrategy"] is None
    assert node["SchedulingEligibility"] == "eligible"
    assert node["LastDrain"]["Status"] == "canceled"
    assert _live_on(nomad_sim, "train") == ["gpu-node-0"]


def test_drain_of_an_empty_node_completes_at_once(nomad_sim: NomadSim, api: nomad.Nomad) -> None:
    """With nothing to move, the drainer marks the drain complete straight away."""
    node_id = nomad_sim.node_id("gpu-node-3")
    api.node.drain_node_with_spec(node_id, {"Deadline": HOUR_NS, "IgnoreSystemJobs": True})
    nomad_sim.wait_for(lambda: nomad_sim.state.node(node_id)["LastDrain"]["Status"] == "complete")
    assert api.node.get_node(node_id)["DrainStrategy"] is None
