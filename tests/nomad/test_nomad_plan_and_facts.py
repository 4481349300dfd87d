"""Pure pieces: the planner's unhealthy-GPU step (only where the executor publishes it) and Nomad node ->
NodeFacts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core.findings import Action
from core.health import Incident, NodeHealth, NodeState
from core.steps import NodeFacts, SetUnhealthyGpus
from remediation.nomad.node_view import node_facts
from remediation.plan.planner import RemediationMemory, RemediationPolicy, plan

NOW = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)


def unhealthy(*gpus: str) -> NodeHealth:
    incident = Incident(id="inc-1", started_at=NOW, reasons=["XID_79"], gpus=list(gpus), action=Action.REBOOT)
    return NodeHealth(
        node="n", state=NodeState.UNHEALTHY, since=NOW, incident=incident, reason="XID_79", message="m"
    )


def healthy() -> NodeHealth:
    return NodeHealth(node="n", state=NodeState.HEALTHY, since=NOW, reason="AllChecksPassed", message="ok")


def gpu_steps(health: NodeHealth, facts: NodeFacts) -> list[SetUnhealthyGpus]:
    steps = plan(health, facts, RemediationPolicy(), RemediationMemory()).steps
    return [step for step in steps if isinstance(step, SetUnhealthyGpus)]


def test_the_incidents_gpus_are_published_sorted_where_the_executor_tracks_them() -> None:
    assert gpu_steps(unhealthy("GPU-b", "GPU-a"), NodeFacts(unhealthy_gpus=())) == [
        SetUnhealthyGpus(("GPU-a", "GPU-b"))
    ]


def test_nothing_is_planned_once_published_or_where_the_executor_does_not_track_them() -> None:
    """Kubernetes facts carry None: the step is never planned there, on any pass."""
    assert gpu_steps(unhealthy("GPU-a"), NodeFacts(unhealthy_gpus=("GPU-a",))) == []
    assert gpu_steps(unhealthy("GPU-a"), NodeFacts()) == []
    assert gpu_steps(healthy(), NodeFacts()) == []


def test_the_list_is_cleared_when_the_incident_closes() -> None:
    assert gpu_steps(healthy(), NodeFacts(unhealthy_gpus=("GPU-a",))) == [SetUnhealthyGpus(())]


def nomad_node(eligibility: str = "eligible", **meta: str) -> dict[str, Any]:
    return {"ID": "n1", "SchedulingEligibility": eligibility, "Meta": meta, "DrainStrategy": None}


def test_our_quarantine_shows_as_a_taint_only_while_the_node_is_ineligible() -> None:
    """Someone made the node eligible again: no taint in the facts, so the planner puts it back."""
    quarantined = {"gpuhealth.quarantine": "reset_gpu:NoSchedule", "gpuhealth.ineligible_by": "gpuhealth"}
    held = node_facts(nomad_node("ineligible", **quarantined))
    lifted = node_facts(nomad_node("eligible", **quarantined))

    assert (held.taint_value, held.taint_effect, held.unschedulable) == ("reset_gpu", "NoSchedule", True)
    assert (lifted.taint_value, lifted.unschedulable) == (None, False)


def test_metadata_maps_to_the_facts_the_planner_compares() -> None:
    facts = node_facts(
        nomad_node(
            **{
                "gpuhealth.state": "unhealthy",
                "gpuhealth.incident": "inc-1",
                "gpuhealth.unhealthy_gpus": "GPU-b,GPU-a",
                "gpuhealth.condition": "False",
                "gpuhealth.reason": "XID_79",
                "gpuhealth.message": "m",
                "gpuhealth.cordoned": "true",
            }
        )
    )
    assert (facts.state_label, facts.incident_annotation, facts.unhealthy_gpus) == (
        "unhealthy",
        "inc-1",
        ("GPU-a", "GPU-b"),
    )
    assert (facts.condition_status, facts.condition_reason, facts.cordoned_by_us) == ("False", "XID_79", True)


def test_a_drain_counts_as_finished_only_when_nomad_says_ours_ended() -> None:
    """gpuhealth.drained names the incident; LastDrain (with our Meta) must be over, not draining."""
    ended = {**nomad_node("ineligible", **{"gpuhealth.drained": "inc-1"})}
    ended["LastDrain"] = {"Status": "complete", "Meta": {"gpuhealth.incident": "inc-1"}}
    running = {
        **ended,
        "DrainStrategy": {"Deadline": 1},
        "LastDrain": {**ended["LastDrain"], "Status": "draining"},
    }
    someone_elses = {**ended, "LastDrain": {"Status": "complete", "Meta": {"message": "maintenance"}}}

    assert node_facts(ended).drain_finished_incident == "inc-1"
    assert node_facts(running).drain_finished_incident is None
    assert node_facts(someone_elses).drain_finished_incident is None
    assert node_facts(None).exists is False
