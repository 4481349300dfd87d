"""The pure remediation plan: only steps that change something, taint/cordon/release by the contract's
names, a human's decision never undone, Events once per key (across restarts), and idempotence."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from health_readings import (
    HEALTHY,
    NVLINK_DOWN,
    NVML_DOWN,
    PCIE_DEGRADED,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    XID_13,
    XID_48,
    XID_79,
    Rig,
    repeat,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.state.machine import DebounceConfig
from core.findings import Verdict
from core.health import NodeHealth, NodeState
from core.plan_memory import MAX_REMEMBERED, remember
from core.steps import (
    Cordon,
    EmitEvent,
    NodeFacts,
    RemoveTaint,
    SetCondition,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    Step,
    Uncordon,
)
from remediation.plan.planner import (
    PlanResult,
    RemediationMemory,
    RemediationPolicy,
    condition_status_for,
    facts_after,
    human_release_applies,
    plan,
)

POLICY = RemediationPolicy()
CORDONING = RemediationPolicy(cordon=True)
HEALTHY_FACTS = NodeFacts(
    condition_status="True",
    condition_reason="AllChecksPassed",
    condition_message="all GPU health checks passed",
    state_label="healthy",
)


class Node:
    """A node driven tick by tick: the state machine's health, planned against facts, applied in full."""

    def __init__(self, policy: RemediationPolicy = POLICY, config: DebounceConfig | None = None) -> None:
        self.rig = Rig(config or DebounceConfig(min_dwell_s=0.0))
        self.policy = policy
        self.facts = HEALTHY_FACTS
        self.memory = RemediationMemory()
        self.rig.feed(HEALTHY)

    @property
    def health(self) -> NodeHealth:
        return self.rig.machine.health

    def tick(self, verdict: Verdict | None = None) -> PlanResult:
        """Observe (when given a verdict), plan, and apply the steps to the facts."""
        if verdict is not None:
            self.rig.feed(verdict)
        result = plan(self.health, self.facts, self.policy, self.memory)
        self.facts = facts_after(self.facts, result.steps)
        self.memory = result.memory
        return result


def kinds(steps: list[Step]) -> list[str]:
    return [type(step).__name__ for step in steps]


def events(steps: list[Step]) -> list[str]:
    return [step.reason for step in steps if isinstance(step, EmitEvent)]


# -- zero writes -----------------------------------------------------------------------------------------


def test_healthy_node_whose_facts_match_gets_no_steps() -> None:
    node = Node()
    for _ in range(50):
        result = node.tick(HEALTHY)
        assert result.steps == []
        assert result.memory == RemediationMemory()


def test_a_fresh_node_is_marked_healthy_once() -> None:
    node = Node()
    node.facts = NodeFacts()
    assert node.tick().steps == [
        SetCondition(status="True", reason="AllChecksPassed", message="all GPU health checks passed"),
        SetStateLabel(state="healthy"),
    ]
    assert node.tick().steps == []


def test_a_missing_node_gets_no_steps() -> None:
    node = Node()
    node.rig.feed(XID_79)
    result = plan(node.health, NodeFacts(exists=False), POLICY, RemediationMemory())
    assert result.steps == []
    assert result.notes


# -- marking and tainting -------------------------------------------------------------------------------


def test_xid_79_taints_marks_and_announces_in_one_plan_taint_first() -> None:
    node = Node()
    result = node.tick(XID_79)
    assert node.health.incident is not None
    incident_id = node.health.incident.id
    assert result.steps[0] == SetTaint(value="reboot", effect="NoSchedule")
    assert result.steps[1:4] == [
        SetCondition(status="False", reason="XID_79", message=node.health.message),
        SetStateLabel(state="unhealthy"),
        SetIncidentAnnotation(incident_id=incident_id),
    ]
    [event] = result.steps[4:]
    assert isinstance(event, EmitEvent)
    assert (event.reason, event.type, event.key) == (
        "GPUHealthUnhealthy",
        "Warning",
        f"{incident_id}/opened/reboot",
    )
    assert "XID_79" in event.message
    assert node.tick().steps == []


def test_xid_13_once_changes_nothing_on_the_node() -> None:
    node = Node()
    assert node.tick(XID_13).steps == []


def test_pending_row_remap_taints_reset_gpu() -> None:
    node = Node()
    node.tick(ROW_REMAP_PENDING)
    assert node.facts.taint_value == "reset_gpu"
    assert node.facts.taint_effect == "NoSchedule"


def test_escalation_raises_the_taint_value_and_is_announced_once() -> None:
    node = Node()
    node.tick(XID_48)
    result = node.tick(XID_79)
    assert SetTaint(value="reboot") in result.steps
    assert events(result.steps) == ["GPUHealthEscalated"]
    assert node.tick(XID_79).steps == []


def test_our_taint_removed_while_the_fault_persists_is_added_back() -> None:
    node = Node()
    node.tick(ROW_REMAP_PENDING)
    node.facts = replace(node.facts, taint_value=None, taint_effect=None)
    result = node.tick(ROW_REMAP_PENDING)
    assert result.steps == [SetTaint(value="reset_gpu")]
    assert any("adding it back" in note for note in result.notes)


def test_configured_effect_is_used_and_an_effect_change_updates_the_taint() -> None:
    node = Node(RemediationPolicy(taint_effect="NoExecute"))
    node.facts = replace(node.facts, taint_value="reboot", taint_effect="NoSchedule")
    result = node.tick(XID_79)
    assert SetTaint(value="reboot", effect="NoExecute") in result.steps


def test_quarantined_node_is_tainted_replace_and_announced_as_quarantined() -> None:
    node = Node()
    result = node.tick(ROW_REMAP_FAILURE)
    assert SetTaint(value="replace") in result.steps
    assert (
        SetCondition(status="False", reason="ROW_REMAP_FAILURE", message=node.health.message) in result.steps
    )
    assert SetStateLabel(state="quarantined") in result.steps
    assert events(result.steps) == ["GPUHealthQuarantined"]


def test_degraded_node_stays_schedulable_with_a_true_condition() -> None:
    node = Node()
    for verdict in repeat(PCIE_DEGRADED, 3):
        result = node.tick(verdict)
    assert kinds(result.steps) == ["SetCondition", "SetStateLabel"]
    assert node.facts.condition_status == "True"
    assert node.facts.condition_reason == "PCIE_LINK_DEGRADED"
    assert node.facts.state_label == "degraded"
    assert node.facts.taint_value is None


def test_unknown_node_shows_unknown_and_is_not_tainted() -> None:
    node = Node()
    result = node.tick(NVML_DOWN)
    assert result.steps == [
        SetCondition(status="Unknown", reason="NVML_UNAVAILABLE", message=node.health.message),
        SetStateLabel(state="unknown"),
    ]


def test_unknown_during_an_incident_keeps_the_taint() -> None:
    node = Node()
    node.tick(XID_79)
    assert node.tick(NVML_DOWN).steps == []
    assert node.facts.taint_value == "reboot"


# -- release ---------------------------------------------------------------------------------------------


def test_recovery_removes_only_our_marks_and_announces_it_once() -> None:
    node = Node()
    node.tick(XID_79)
    assert node.health.incident is not None
    incident_id = node.health.incident.id
    for verdict in repeat(HEALTHY, 3):
        result = node.tick(verdict)
    assert node.health.state is NodeState.HEALTHY
    assert result.steps[:4] == [
        RemoveTaint(),
        SetCondition(status="True", reason="AllChecksPassed", message="all GPU health checks passed"),
        SetStateLabel(state="healthy"),
        SetIncidentAnnotation(incident_id=None),
    ]
    [event] = result.steps[4:]
    assert isinstance(event, EmitEvent)
    assert (event.reason, event.type, event.key) == (
        "GPUHealthRecovered",
        "Normal",
        f"{incident_id}/recovered",
    )
    assert node.tick(HEALTHY).steps == []
    assert node.facts == HEALTHY_FACTS


# -- cordon ----------------------------------------------------------------------------------------------


def test_cordon_only_when_policy_asks() -> None:
    assert Cordon() not in Node().tick(XID_79).steps
    node = Node(CORDONING)
    result = node.tick(XID_79)
    assert Cordon() in result.steps
    assert node.facts.unschedulable and node.facts.cordoned_by_us
    assert node.health.incident is not None
    assert result.memory.cordoned_for == node.health.incident.id


def test_release_uncordons_only_when_we_cordoned() -> None:
    node = Node(CORDONING)
    node.tick(XID_79)
    result = node.tick(HEALTHY)
    for verdict in repeat(HEALTHY, 2):
        result = node.tick(verdict)
    assert Uncordon() in result.steps
    assert not node.facts.unschedulable and not node.facts.cordoned_by_us
    assert result.memory.cordoned_for is None


def test_a_node_a_human_cordoned_is_left_cordoned_and_never_uncordoned_by_us() -> None:
    node = Node(CORDONING)
    node.facts = replace(node.facts, unschedulable=True)
    result = node.tick(XID_79)
    assert Cordon() not in result.steps
    assert any("someone else" in note for note in result.notes)
    for verdict in repeat(HEALTHY, 3):
        result = node.tick(verdict)
        assert Uncordon() not in result.steps
    assert node.facts.unschedulable


def test_a_human_uncordon_is_not_undone_for_the_same_incident() -> None:
    node = Node(CORDONING)
    node.tick(XID_79)
    node.facts = replace(node.facts, unschedulable=False)  # kubectl uncordon: our annotation stays
    result = node.tick(XID_79)
    assert kinds(result.steps) == ["EmitEvent"]
    assert events(result.steps) == ["GPUHealthHumanOverride"]
    assert any("not re-cordoning" in note for note in result.notes)
    assert node.facts.cordoned_by_us  # our annotation stays as the record, until the incident ends
    for _ in range(5):
        assert node.tick(XID_79).steps == []
    assert node.facts.taint_value == "reboot"  # the taint is a separate promise and stays


def test_a_human_uncordon_is_recognised_again_after_the_memory_is_lost() -> None:
    node = Node(CORDONING)
    node.tick(XID_79)
    node.facts = replace(node.facts, unschedulable=False)
    node.tick(XID_79)
    node.memory = RemediationMemory()
    result = node.tick(XID_79)
    assert Cordon() not in result.steps
    assert not node.facts.unschedulable


def test_a_human_uncordon_does_not_carry_over_to_the_next_incident() -> None:
    node = Node(CORDONING)
    node.tick(XID_79)
    node.facts = replace(node.facts, unschedulable=False)
    node.tick(XID_79)
    for verdict in repeat(HEALTHY, 3):
        node.tick(verdict)
    assert not node.facts.cordoned_by_us  # the release cleared our stale annotation
    assert Cordon() in node.tick(XID_48).steps


# -- human release ---------------------------------------------------------------------------------------


def test_a_human_release_lifts_taint_and_cordon_and_is_never_undone_for_that_incident() -> None:
    node = Node(CORDONING)
    node.tick(ROW_REMAP_PENDING)
    assert node.health.incident is not None
    node.facts = replace(node.facts, manual_release=node.health.incident.id)
    result = node.tick(ROW_REMAP_PENDING)
    assert RemoveTaint() in result.steps
    assert Uncordon() in result.steps
    assert events(result.steps) == ["GPUHealthHumanOverride"]
    assert node.facts.condition_status == "False"  # the condition keeps telling the truth
    for _ in range(5):
        assert node.tick(ROW_REMAP_PENDING).steps == []
    assert node.facts.taint_value is None and not node.facts.unschedulable


def test_a_stale_release_annotation_from_an_earlier_incident_is_ignored() -> None:
    node = Node()
    node.facts = replace(node.facts, manual_release="inc-earlier")
    node.tick(XID_79)
    assert node.facts.taint_value == "reboot"


@pytest.mark.parametrize(
    ("value", "applies"),
    [
        (None, False),
        ("", False),
        ("inc-1", True),
        ("inc-0", False),
        ("2026-12-02T07:40:10Z", True),  # the moment the incident opened
        ("2026-12-02T09:00:00+00:00", True),
        ("2026-12-02T07:40:09", False),  # naive = UTC, one second before it opened
        ("2026-11-30T00:00:00Z", False),
        ("yes please", False),
    ],
)
def test_release_annotation_applies_by_incident_id_or_time(value: str | None, applies: bool) -> None:
    rig = Rig()
    rig.feed(XID_79)
    incident = rig.machine.health.incident
    assert incident is not None and incident.started_at == rig.clock.now()
    assert human_release_applies(incident, value) is applies


# -- policy switches -------------------------------------------------------------------------------------


def test_without_mark_no_condition_or_label_steps() -> None:
    node = Node(RemediationPolicy(mark=False))
    node.facts = NodeFacts()
    assert kinds(node.tick(XID_79).steps) == ["SetTaint", "SetIncidentAnnotation", "EmitEvent"]


def test_without_taint_no_taint_steps() -> None:
    node = Node(RemediationPolicy(taint=False))
    node.tick(XID_79)
    assert node.facts.taint_value is None
    node.facts = replace(node.facts, taint_value="reboot")
    for verdict in repeat(HEALTHY, 3):
        assert not any(isinstance(s, RemoveTaint | SetTaint) for s in node.tick(verdict).steps)


def test_without_events_no_event_steps() -> None:
    node = Node(RemediationPolicy(events=False))
    results = [node.tick(v) for v in [XID_48, XID_79, *repeat(HEALTHY, 3)]]
    assert all(not events(r.steps) for r in results)


def test_bad_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="taint_effect"):
        RemediationPolicy.model_validate({"taint_effect": "Evict"})
    with pytest.raises(ValueError, match="reboot"):
        RemediationPolicy.model_validate({"reboot": True})


# -- events across restarts and failures ----------------------------------------------------------------


def test_events_are_not_planned_again_after_a_restart() -> None:
    node = Node()
    node.tick(XID_48)
    node.memory = RemediationMemory.model_validate_json(node.memory.model_dump_json())
    node.facts = replace(node.facts, taint_value=None)  # someone removed the taint while we were down
    result = node.tick(XID_48)
    assert result.steps == [SetTaint(value="reset_gpu")]


def test_an_event_whose_key_was_forgotten_after_a_failure_is_planned_again() -> None:
    node = Node()
    first = node.tick(XID_79)
    [event] = [s for s in first.steps if isinstance(s, EmitEvent)]
    node.memory = node.memory.model_copy(
        update={"emitted_events": tuple(k for k in node.memory.emitted_events if k != event.key)}
    )
    assert node.tick(XID_79).steps == [event]


def test_remembered_lists_are_bounded_newest_kept() -> None:
    entries: tuple[str, ...] = ()
    for number in range(MAX_REMEMBERED + 10):
        entries = remember(entries, f"key-{number}")
    assert len(entries) == MAX_REMEMBERED
    assert entries[-1] == f"key-{MAX_REMEMBERED + 9}"
    assert remember(entries, entries[-1]) is entries


# -- idempotence -----------------------------------------------------------------------------------------

VERDICTS = [
    HEALTHY,
    XID_13,
    XID_48,
    XID_79,
    NVLINK_DOWN,
    PCIE_DEGRADED,
    ROW_REMAP_PENDING,
    ROW_REMAP_FAILURE,
    NVML_DOWN,
]
HUMAN_MOVES = ["none", "remove_taint", "uncordon", "cordon", "release"]


@settings(max_examples=150, deadline=None)
@given(
    ticks=st.lists(
        st.tuples(st.sampled_from(range(len(VERDICTS))), st.sampled_from(HUMAN_MOVES)),
        min_size=1,
        max_size=30,
    ),
    policy=st.builds(
        RemediationPolicy,
        mark=st.booleans(),
        taint=st.booleans(),
        taint_effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        cordon=st.booleans(),
        events=st.booleans(),
    ),
)
def test_property_plan_applied_to_its_own_facts_plans_nothing(
    ticks: list[tuple[int, str]], policy: RemediationPolicy
) -> None:
    """Whatever the readings, policy and human interventions: plan -> apply -> plan again == no steps."""
    node = Node(policy, DebounceConfig(min_dwell_s=15.0))
    for verdict_index, move in ticks:
        node.rig.feed(VERDICTS[verdict_index])
        node.facts = human_move(node, move)
        node.tick()
        again = plan(node.health, node.facts, node.policy, node.memory)
        assert again.steps == []
        assert again.memory == node.memory


def human_move(node: Node, move: str) -> NodeFacts:
    """What a human may do to the node between two ticks."""
    facts = node.facts
    incident = node.health.incident
    match move:
        case "remove_taint":
            return replace(facts, taint_value=None, taint_effect=None)
        case "uncordon":
            return replace(facts, unschedulable=False)
        case "cordon":
            return replace(facts, unschedulable=True)
        case "release" if incident is not None:
            return replace(facts, manual_release=(incident.started_at + timedelta(seconds=1)).isoformat())
        case _:
            return facts


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (NodeState.HEALTHY, "True"),
        (NodeState.DEGRADED, "True"),
        (NodeState.UNHEALTHY, "False"),
        (NodeState.QUARANTINED, "False"),
        (NodeState.UNKNOWN, "Unknown"),
        (NodeState.TESTING, "Unknown"),
    ],
)
def test_every_node_state_maps_to_a_condition_status(state: NodeState, status: str) -> None:
    assert condition_status_for(state) == status
