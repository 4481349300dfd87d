"""The debounce state machine: fatal events act at once, polled signals need N readings, recovery needs M
clean readings and the dwell time, one incident survives reason changes and restarts, unknown never
escalates, alternating signals never flap."""

from __future__ import annotations

from datetime import timedelta

import pytest
from health_readings import (
    GPU_LOST,
    HEALTHY,
    INTERVAL_S,
    NODE,
    NVLINK_DOWN,
    NVML_DOWN,
    PCIE_DEGRADED,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    START,
    XID_13,
    XID_48,
    XID_79,
    Rig,
    gpu_fields,
    reading,
    repeat,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agent.state.machine import (
    ALL_CHECKS_PASSED,
    MANUAL_QUARANTINE,
    AgentState,
    DebounceConfig,
    HealthStateMachine,
)
from checks.config import ChecksConfig, PcieConfig
from checks.runner import run_checks
from core.findings import Action, Verdict
from core.health import NodeState
from core.plan_memory import RemediationMemory
from core.snapshot import GpuSnapshot, NodeSnapshot

UNHEALTHY = NodeState.UNHEALTHY.value
HEALTHY_STATE = NodeState.HEALTHY.value


def pcie_width_fault() -> Verdict:
    """A polled fault of another code than NVLINK_DOWN: PCIe width configured to need a GPU reset."""
    config = ChecksConfig(pcie=PcieConfig(width_degraded_action=Action.RESET_GPU))
    snapshot_gpu = GpuSnapshot.model_validate(
        gpu_fields(pcie={"gen": 5, "width": 8, "max_gen": 5, "max_width": 16})
    )
    return run_checks(NodeSnapshot(node=NODE, gpus=[snapshot_gpu]), config)


# -- opening ------------------------------------------------------------------------------------------------


def test_fatal_xid_opens_an_incident_on_the_first_reading() -> None:
    rig = Rig()
    assert rig.feed(HEALTHY, XID_79) == [HEALTHY_STATE, UNHEALTHY]
    health = rig.machine.health
    assert health.incident is not None
    assert health.incident.id == "inc-1"
    assert health.incident.reasons == ["XID_79"]
    assert health.incident.action is Action.REBOOT
    assert health.incident.gpus == [XID_79.findings[0].gpu]
    assert health.reason == "XID_79"
    assert health.message.startswith("reboot: ")
    assert health.since == health.incident.started_at == START + timedelta(seconds=2 * INTERVAL_S)


@pytest.mark.parametrize(
    ("verdict", "action"),
    [(ROW_REMAP_PENDING, Action.RESET_GPU), (GPU_LOST, Action.REBOOT), (XID_48, Action.RESET_GPU)],
    ids=["row-remap-pending", "gpu-lost", "xid-48"],
)
def test_fatal_memory_and_presence_findings_act_at_once(verdict: Verdict, action: Action) -> None:
    rig = Rig()
    assert rig.feed(verdict) == [UNHEALTHY]
    assert rig.machine.health.incident is not None
    assert rig.machine.health.incident.action is action


def test_a_single_xid_13_changes_nothing() -> None:
    rig = Rig()
    assert rig.feed(HEALTHY, XID_13, HEALTHY) == [HEALTHY_STATE] * 3
    assert rig.machine.health.incident is None


def test_application_faults_held_for_n_readings_make_the_node_degraded_without_incident() -> None:
    rig = Rig()
    assert rig.feed(*repeat(XID_13, 3)) == [HEALTHY_STATE, HEALTHY_STATE, NodeState.DEGRADED.value]
    assert rig.machine.health.incident is None
    assert rig.machine.health.reason == "XID_13"


def test_degraded_ends_only_after_m_calm_readings() -> None:
    rig = Rig()
    rig.feed(*repeat(PCIE_DEGRADED, 3))
    assert rig.feed(HEALTHY, HEALTHY, HEALTHY) == ["degraded", "degraded", HEALTHY_STATE]
    assert rig.machine.health.reason == ALL_CHECKS_PASSED


def test_polled_fault_needs_n_consecutive_readings() -> None:
    rig = Rig()
    assert rig.feed(*repeat(NVLINK_DOWN, 3)) == [HEALTHY_STATE, HEALTHY_STATE, UNHEALTHY]


def test_polled_streaks_count_per_code_not_per_node() -> None:
    """Two different polled codes taking turns never make three consecutive readings of one code."""
    rig = Rig()
    other = pcie_width_fault()
    assert other.findings[0].code == "PCIE_LINK_DEGRADED"
    states = rig.feed(NVLINK_DOWN, other, NVLINK_DOWN, other, NVLINK_DOWN, other)
    assert UNHEALTHY not in states


def test_polled_debounce_is_configurable() -> None:
    rig = Rig(DebounceConfig(polled_bad_readings=1))
    assert rig.feed(NVLINK_DOWN) == [UNHEALTHY]


def test_immediate_checks_can_be_narrowed_so_fatal_events_are_debounced_too() -> None:
    rig = Rig(DebounceConfig(immediate_checks=frozenset({"presence"})))
    assert rig.feed(ROW_REMAP_PENDING, ROW_REMAP_PENDING, ROW_REMAP_PENDING) == [
        HEALTHY_STATE,
        HEALTHY_STATE,
        UNHEALTHY,
    ]


# -- one incident ----------------------------------------------------------------------------------------


def test_new_codes_join_the_open_incident_keeping_id_start_and_since() -> None:
    rig = Rig()
    rig.feed(XID_48)
    opened = rig.machine.health
    rig.feed(ROW_REMAP_PENDING, XID_79)
    health = rig.machine.health
    assert health.incident is not None and opened.incident is not None
    assert health.incident.id == opened.incident.id
    assert health.incident.started_at == opened.incident.started_at
    assert health.incident.reasons == ["XID_48", "ROW_REMAP_PENDING", "XID_79"]
    assert health.since == opened.since
    assert rig.ids.made == [(NODE, opened.incident.started_at)]


def test_incident_action_rises_and_never_decreases_while_open() -> None:
    rig = Rig()
    actions = []
    for verdict in (XID_48, XID_79, XID_48, ROW_REMAP_PENDING):
        rig.feed(verdict)
        assert rig.machine.health.incident is not None
        actions.append(rig.machine.health.incident.action)
    assert actions == [Action.RESET_GPU, Action.REBOOT, Action.REBOOT, Action.REBOOT]


def test_reason_is_the_leading_finding_worst_action_first() -> None:
    both = reading(gpu_fields(0, remapped_rows={"pending": True}), gpu_fields(1, lost=True))
    rig = Rig()
    rig.feed(both)
    assert rig.machine.health.reason == "GPU_LOST"
    assert rig.machine.health.message.endswith("(+1 more)")
    assert rig.machine.health.incident is not None
    assert len(rig.machine.health.incident.gpus) == 2


# -- recovery --------------------------------------------------------------------------------------------


def test_recovery_needs_m_clean_readings_and_the_dwell_of_uninterrupted_clean_readings() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=60.0))
    rig.feed(XID_79)  # t = 10 s
    states = rig.feed(*repeat(HEALTHY, 7))  # t = 20 .. 80 s, clean from t = 20 s
    assert states == [UNHEALTHY] * 6 + [HEALTHY_STATE]  # closes at t = 80 s: 60 s of clean readings
    assert rig.machine.health.incident is None
    assert rig.machine.health.reason == ALL_CHECKS_PASSED
    assert rig.machine.health.since == START + timedelta(seconds=80)


def test_dwell_alone_is_not_enough_clean_readings_are_needed() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=3))
    rig.feed(XID_79)
    assert rig.feed(HEALTHY, HEALTHY, HEALTHY, every_s=1000.0) == [UNHEALTHY, UNHEALTHY, HEALTHY_STATE]


def test_warn_findings_with_no_action_count_as_clean_for_recovery() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=0.0))
    rig.feed(XID_79)
    assert rig.feed(*repeat(PCIE_DEGRADED, 3))[-1] == NodeState.DEGRADED.value


def test_fault_still_present_keeps_the_incident_open_forever() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=0.0))
    assert set(rig.feed(*repeat(ROW_REMAP_PENDING, 100))) == {UNHEALTHY}


def test_replace_incident_never_closes_by_itself_until_a_human_releases() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=0.0))
    assert rig.feed(ROW_REMAP_FAILURE) == [NodeState.QUARANTINED.value]
    assert set(rig.feed(*repeat(HEALTHY, 50), every_s=600.0)) == {NodeState.QUARANTINED.value}
    health = rig.machine.release_by_human("row remapping checked by the vendor")
    assert health.state is NodeState.HEALTHY
    assert health.incident is None


def test_escalation_to_replace_turns_an_unhealthy_node_quarantined() -> None:
    rig = Rig()
    rig.feed(ROW_REMAP_PENDING)
    rig.feed(ROW_REMAP_FAILURE)
    assert rig.machine.health.state is NodeState.QUARANTINED
    assert rig.machine.health.incident is not None
    assert rig.machine.health.incident.id == "inc-1"


def test_manual_quarantine_holds_a_healthy_node_until_released() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=0.0))
    rig.feed(HEALTHY)
    health = rig.machine.quarantine("fan noise reported by the DC team")
    assert health.state is NodeState.QUARANTINED
    assert health.manual_quarantine
    assert health.reason == MANUAL_QUARANTINE
    assert "fan noise" in health.message
    assert health.incident is not None and health.incident.action is Action.REPLACE
    assert set(rig.feed(*repeat(HEALTHY, 10))) == {NodeState.QUARANTINED.value}
    released = rig.machine.release_by_human("fan replaced")
    assert released.state is NodeState.HEALTHY
    assert not released.manual_quarantine


def test_manual_quarantine_joins_an_open_incident() -> None:
    rig = Rig()
    rig.feed(XID_48)
    health = rig.machine.quarantine("hold for RMA")
    assert health.incident is not None
    assert health.incident.id == "inc-1"
    assert health.incident.reasons == ["XID_48", MANUAL_QUARANTINE]
    assert health.state is NodeState.QUARANTINED


def test_human_release_is_honoured_until_the_released_fault_clears_once() -> None:
    rig = Rig()
    rig.feed(ROW_REMAP_PENDING)
    rig.machine.release_by_human("known, reset scheduled")
    assert rig.feed(*repeat(ROW_REMAP_PENDING, 5)) == [HEALTHY_STATE] * 5
    rig.feed(HEALTHY)
    assert rig.feed(ROW_REMAP_PENDING) == [UNHEALTHY]
    assert rig.machine.health.incident is not None
    assert rig.machine.health.incident.id == "inc-2"


# -- no flapping -----------------------------------------------------------------------------------------


def test_alternating_polled_signal_never_opens_an_incident() -> None:
    rig = Rig()
    states = rig.feed(*[NVLINK_DOWN, HEALTHY] * 30)
    assert set(states) == {HEALTHY_STATE}


def test_alternating_signal_never_closes_an_open_incident_early() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=60.0))
    rig.feed(*repeat(NVLINK_DOWN, 3))
    assert set(rig.feed(*[NVLINK_DOWN, HEALTHY] * 60)) == {UNHEALTHY}  # 20 minutes, past the dwell
    # The clean run began with the last HEALTHY of the alternation: 60 s later (6 readings) it closes.
    assert rig.feed(*repeat(HEALTHY, 7)) == [UNHEALTHY] * 5 + [HEALTHY_STATE] * 2


# -- unknown ---------------------------------------------------------------------------------------------


def test_unknown_readings_show_unknown_and_open_no_incident() -> None:
    rig = Rig()
    assert rig.feed(HEALTHY, NVML_DOWN, NVML_DOWN) == [HEALTHY_STATE, "unknown", "unknown"]
    health = rig.machine.health
    assert health.incident is None
    assert health.reason == "NVML_UNAVAILABLE"
    assert rig.feed(HEALTHY) == [HEALTHY_STATE]


def test_unknown_state_waits_for_the_configured_number_of_readings() -> None:
    rig = Rig(DebounceConfig(unknown_readings=3))
    assert rig.feed(HEALTHY, NVML_DOWN, NVML_DOWN, NVML_DOWN) == [HEALTHY_STATE] * 3 + ["unknown"]


def test_unknown_keeps_an_open_incident_and_does_not_count_as_clean() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=20.0))
    rig.feed(XID_79)
    rig.feed(HEALTHY, HEALTHY)
    assert set(rig.feed(*repeat(NVML_DOWN, 40))) == {UNHEALTHY}
    assert rig.machine.health.incident is not None
    assert rig.machine.health.reason == "XID_79"
    assert rig.feed(HEALTHY, HEALTHY, HEALTHY) == [UNHEALTHY, UNHEALTHY, HEALTHY_STATE]


def test_unknown_readings_neither_advance_nor_reset_polled_streaks() -> None:
    rig = Rig()
    assert rig.feed(NVLINK_DOWN, NVLINK_DOWN, NVML_DOWN, NVLINK_DOWN) == [
        HEALTHY_STATE,
        HEALTHY_STATE,
        "unknown",
        UNHEALTHY,
    ]


SEQUENCE_ITEMS = [HEALTHY, XID_13, XID_48, XID_79, NVLINK_DOWN, PCIE_DEGRADED, ROW_REMAP_PENDING, NVML_DOWN]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(range(len(SEQUENCE_ITEMS))), max_size=40))
def test_property_an_unknown_reading_never_escalates(indices: list[int]) -> None:
    """Whatever came before, an unknown reading never opens, joins or raises an incident."""
    rig = Rig(DebounceConfig(min_dwell_s=20.0))
    for index in indices:
        before = rig.machine.health
        rig.feed(SEQUENCE_ITEMS[index])
        after = rig.machine.health
        if SEQUENCE_ITEMS[index] is NVML_DOWN:
            assert after.incident == before.incident
            if before.incident is None:
                assert after.state in (NodeState.UNKNOWN, before.state)


# -- state continuity ------------------------------------------------------------------------------------


def test_restart_from_exported_state_continues_the_same_incident() -> None:
    rig = Rig(DebounceConfig(min_dwell_s=60.0))
    rig.feed(XID_79, HEALTHY)
    saved = AgentState.model_validate_json(rig.machine.export(RemediationMemory()).model_dump_json())
    restarted = rig.build(initial=saved)
    assert restarted.health == rig.machine.health
    rig.machine = restarted
    assert rig.feed(XID_48) == [UNHEALTHY]
    assert rig.machine.health.incident is not None
    assert rig.machine.health.incident.id == "inc-1"
    assert rig.ids.made == [(NODE, START + timedelta(seconds=INTERVAL_S))]


def test_restart_continues_polled_streaks() -> None:
    rig = Rig()
    rig.feed(NVLINK_DOWN, NVLINK_DOWN)
    rig.machine = rig.build(initial=rig.machine.export(RemediationMemory()))
    assert rig.feed(NVLINK_DOWN) == [UNHEALTHY]


def test_state_of_another_node_is_ignored() -> None:
    rig = Rig()
    rig.feed(XID_79)
    foreign = rig.machine.export(RemediationMemory()).model_copy(update={"node": "gpu-node-99"})
    fresh = rig.build(initial=foreign)
    assert fresh.health.incident is None
    assert fresh.health.state is NodeState.UNKNOWN


def test_machine_without_a_reading_is_unknown() -> None:
    machine = HealthStateMachine(NODE, DebounceConfig(), clock=lambda: START)
    assert machine.health.state is NodeState.UNKNOWN
    assert machine.health.since == START


@pytest.mark.parametrize(
    "steady", [HEALTHY, PCIE_DEGRADED, NVML_DOWN, ROW_REMAP_FAILURE], ids=lambda v: v.status.value
)
def test_steady_readings_export_an_unchanging_state(steady: Verdict) -> None:
    """The state file is rewritten only on change, so a steady node must export identical state."""
    rig = Rig()
    rig.feed(*repeat(steady, 5))
    first = rig.machine.export(RemediationMemory())
    rig.feed(*repeat(steady, 20))
    assert rig.machine.export(RemediationMemory()) == first


def test_default_incident_ids_are_readable_and_unique() -> None:
    machine = HealthStateMachine(NODE, DebounceConfig(), clock=lambda: START)
    health = machine.observe(XID_79)
    assert health.incident is not None
    assert health.incident.id.startswith(f"inc-{NODE}-20261202T074000Z-")
    other = HealthStateMachine(NODE, DebounceConfig(), clock=lambda: START).observe(XID_79)
    assert other.incident is not None and other.incident.id != health.incident.id


# -- configuration ---------------------------------------------------------------------------------------


def test_memory_in_immediate_checks_stands_for_the_memory_check_families() -> None:
    """``memory`` expands to its check families; a failed DCGM diagnostic (a one-shot test) and the exporter's
    faults (the same memory and XID checks as NVML's, or DCGM's already-filtered health watches) act at once."""
    assert DebounceConfig().immediate_checks == {
        "dcgm_diag",
        "dcgm_exporter",
        "xid",
        "presence",
        "ecc",
        "row_remap",
        "retired_pages",
        "recovery_action",
    }


@pytest.mark.parametrize(
    "bad",
    [{"polled_bad_readings": 0}, {"min_dwell_s": -1}, {"unknown_readings": 0}, {"debounce": 3}],
    ids=["zero-readings", "negative-dwell", "zero-unknown", "unknown-field"],
)
def test_bad_debounce_configuration_is_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DebounceConfig.model_validate(bad)
