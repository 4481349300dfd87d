"""The plan's per-GPU quarantine and partial drain (``remediation/plan/gpu_scope.py``): device taints for the faulty
GPUs that are DRA devices, the node taint instead of or after them as ``policy.gpu_quarantine`` says, the
node taint as today without DRA, and a drain limited to the faulty GPUs behind the same permit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.findings import Action, Finding, Status
from core.health import Incident, NodeHealth, NodeState
from core.steps import (
    Drain,
    NodeFacts,
    Reboot,
    RemoveDeviceTaints,
    RemoveTaint,
    RequestPermit,
    Reset,
    SetDeviceTaints,
    SetTaint,
    Step,
)
from remediation.plan.planner import RemediationMemory, RemediationPolicy, facts_after, plan
from remediation.plan.recovery import RecoveryRules

STARTED = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
INCIDENT_ID = "inc-gpu-node-0-20261202T140000Z-ab12"
GPUS = tuple(f"GPU-{index}" for index in range(8))
DRA = NodeFacts(dra_gpus=GPUS)
INSTEAD = RemediationPolicy(gpu_quarantine="instead")


def health(action: Action = Action.RESET_GPU, gpus: tuple[str | None, ...] = ("GPU-3",)) -> NodeHealth:
    findings = [
        Finding(
            check="memory", gpu=gpu, status=Status.FAIL, code="ROW_REMAP_FAILURE", message="m", action=action
        )
        for gpu in gpus
    ]
    incident = Incident(
        id=INCIDENT_ID,
        started_at=STARTED,
        reasons=["ROW_REMAP_FAILURE"],
        gpus=[gpu for gpu in gpus if gpu],
        action=action,
        findings=findings,
    )
    return NodeHealth(
        node="gpu-node-0",
        state=NodeState.UNHEALTHY,
        since=STARTED,
        incident=incident,
        reason="R",
        message="m",
    )


def taint_steps(steps: list[Step]) -> list[Step]:
    return [s for s in steps if isinstance(s, SetTaint | RemoveTaint | SetDeviceTaints | RemoveDeviceTaints)]


def test_a_single_gpu_fault_on_a_dra_node_taints_that_device_instead_of_the_node() -> None:
    steps = plan(health(), DRA, INSTEAD, RemediationMemory()).steps

    assert taint_steps(steps) == [SetDeviceTaints(gpus=("GPU-3",), value="reset_gpu", effect="NoSchedule")]


def test_without_dra_devices_the_node_taint_stays_as_today() -> None:
    """``dra_gpus`` None (no ResourceSlice, Nomad, the feature off in the executor): the node taint."""
    steps = plan(health(), NodeFacts(), INSTEAD, RemediationMemory()).steps

    assert taint_steps(steps) == [SetTaint(value="reset_gpu", effect="NoSchedule")]


def test_the_policy_off_keeps_the_node_taint_even_on_a_dra_node() -> None:
    steps = plan(health(), DRA, RemediationPolicy(), RemediationMemory()).steps

    assert taint_steps(steps) == [SetTaint(value="reset_gpu", effect="NoSchedule")]


def test_a_node_wide_fault_gets_the_node_taint_too() -> None:
    """A reboot, or a node-level finding beside the GPU's, takes the whole node: both taints."""
    for case in (health(action=Action.REBOOT), health(gpus=("GPU-3", None))):
        steps = taint_steps(plan(case, DRA, INSTEAD, RemediationMemory()).steps)
        assert (
            SetTaint(value=case.incident.action.value if case.incident else "", effect="NoSchedule") in steps
        )
        assert any(isinstance(step, SetDeviceTaints) for step in steps)


def test_before_adds_the_node_taint_once_the_incident_is_old_enough() -> None:
    policy = RemediationPolicy(gpu_quarantine="before", node_taint_after_s=600)
    early = plan(health(), DRA, policy, RemediationMemory(), now=STARTED + timedelta(seconds=599)).steps
    late = plan(health(), DRA, policy, RemediationMemory(), now=STARTED + timedelta(seconds=600)).steps

    assert not any(isinstance(step, SetTaint) for step in early)
    assert SetTaint(value="reset_gpu", effect="NoSchedule") in late


def test_device_taints_are_idempotent_and_go_with_the_incident() -> None:
    first = plan(health(), DRA, INSTEAD, RemediationMemory())
    tainted = facts_after(DRA, first.steps)
    again = plan(health(), tainted, INSTEAD, first.memory)
    healthy = NodeHealth(node="gpu-node-0", state=NodeState.HEALTHY, since=STARTED, reason="ok", message="ok")
    released = plan(healthy, tainted, INSTEAD, again.memory)

    assert taint_steps(again.steps) == []
    assert taint_steps(released.steps) == [RemoveDeviceTaints()]


def test_the_effect_follows_the_policy() -> None:
    policy = RemediationPolicy(gpu_quarantine="instead", gpu_taint_effect="NoExecute")
    steps = taint_steps(plan(health(), DRA, policy, RemediationMemory()).steps)

    assert steps == [SetDeviceTaints(gpus=("GPU-3",), value="reset_gpu", effect="NoExecute")]


def test_a_partial_drain_is_limited_to_the_faulty_gpus_behind_the_same_permit() -> None:
    policy = RemediationPolicy(drain=True, partial_drain=True, drain_deadline_s=600.0)

    steps = plan(health(), NodeFacts(), policy, RemediationMemory()).steps

    assert steps[-2:] == [
        RequestPermit(purpose="drain", incident_id=INCIDENT_ID, action=Action.RESET_GPU),
        Drain(incident_id=INCIDENT_ID, deadline_s=600.0, gpus=("GPU-3",)),
    ]


def test_a_node_wide_fault_drains_the_whole_node_even_with_partial_drain_on() -> None:
    policy = RemediationPolicy(drain=True, partial_drain=True, drain_deadline_s=600.0)

    steps = plan(health(action=Action.REBOOT), NodeFacts(), policy, RemediationMemory()).steps

    assert steps[-1] == Drain(incident_id=INCIDENT_ID, deadline_s=600.0)


def test_an_incident_drained_only_on_its_gpus_gets_no_reboot_when_it_needs_the_whole_node() -> None:
    """Partial drain, then the incident escalates to reboot: the pods on the other GPUs still run, so no
    reset or reboot is planned (a human drains the node); the node taint is back on."""
    policy = RemediationPolicy(drain=True, partial_drain=True)
    rules = RecoveryRules(max_attempts=2, reboot=True)
    first = plan(health(), NodeFacts(), policy, RemediationMemory(), recovery=rules)
    drained = facts_after(NodeFacts(drain_finished_incident=INCIDENT_ID, boot_id="boot-1"), first.steps)

    escalated = plan(health(action=Action.REBOOT), drained, policy, first.memory, recovery=rules)

    assert INCIDENT_ID in first.memory.partially_drained
    assert not [s for s in escalated.steps if isinstance(s, Reboot | Reset | Drain)]
    assert SetTaint(value="reboot", effect="NoSchedule") in escalated.steps
    assert any("drained only on its GPUs" in note for note in escalated.notes)


def test_a_single_gpu_incident_after_its_partial_drain_goes_on_to_its_reset() -> None:
    policy = RemediationPolicy(drain=True, partial_drain=True)
    rules = RecoveryRules(max_attempts=2, reboot=True)
    first = plan(health(), NodeFacts(), policy, RemediationMemory(), recovery=rules)
    drained = facts_after(NodeFacts(drain_finished_incident=INCIDENT_ID, boot_id="boot-1"), first.steps)

    after = plan(health(), drained, policy, first.memory, recovery=rules)

    assert Reset(incident_id=INCIDENT_ID, gpus=("GPU-3",), attempt=1) in after.steps
