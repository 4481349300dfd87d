"""The pure remediation plan: desired node state from ``NodeHealth`` + policy, diffed against ``NodeFacts``.

``plan()`` returns only the steps that change something, so a healthy node whose facts already match gets
no steps at all (zero API writes). Rules (docs/agent.md, "What the agent writes on its Node"):

* Mark (``policy.mark``): condition ``GPUHealthy`` True for healthy/degraded, False for unhealthy/quarantined,
  Unknown for unknown/testing, reason and message from the health; label ``gpuhealth.io/state``.
* Taint (``policy.taint``): ``gpuhealth.io/unhealthy=<incident action>:<effect>`` while an incident is open,
  value raised when the action escalates, re-added if someone removed it while the fault is still there
  (drift), and removed — only ours — once the incident closes.
* Deep diagnostic (``testing`` without an incident): taint ``gpuhealth.io/unhealthy=testing:NoSchedule``
  while ``dcgmi diag`` runs, whatever ``policy.taint`` says; removed when the node leaves ``testing``.
* Cordon (``policy.cordon``): only when no one else already cordoned the node; Uncordon only when our
  ``gpuhealth.io/cordoned`` annotation says we did.
* A human's decision is never undone for the incident it was made in: a human uncordon of our cordon
  (annotation still ours, ``spec.unschedulable`` cleared) means no re-cordon; a human release (the
  ``gpuhealth.io/manual-release`` annotation naming the incident id, or a timestamp at or after the incident
  started — an older value is a leftover of an earlier incident) means our taint and cordon go and are not
  re-applied. The node's condition and label keep telling the truth.
* Events (``policy.events``), each planned once per key, keys remembered across restarts:
  ``GPUHealthUnhealthy`` / ``GPUHealthQuarantined`` when an incident opens, ``GPUHealthEscalated`` when
  its action rises, ``GPUHealthRecovered`` when it closes, ``GPUHealthHumanOverride`` when a human overrides.
* Drain (``policy.drain``, off by default): when an incident whose action takes the node out of service is
  open on an unhealthy or quarantined node, no human released it or lifted our cordon, and no drain was
  started for it yet (``memory.drained``, ``facts.drained_incident``), the plan ends with
  ``RequestPermit("drain", incident)`` then ``Drain(incident, policy.drain_deadline_s)``: the permit guards
  the drain, and nothing else needs one. Never planned twice for one incident, whatever its outcome.
* Recovery (``recovery`` rules given, off by default): once the drain ended, a permitted GPU reset or reboot
  request, then validation — see ``remediation/plan/recovery.py``; planned after everything else.

The returned memory assumes the steps will be applied. Re-planning after a failed apply plans the same node
changes again because they are diffed against facts; an Event is planned while its key is missing from
``memory.emitted_events``, so the loop drops the keys of Events that failed and they are planned again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.health import Incident, NodeHealth, NodeState
from core.plan_memory import RemediationMemory, remember
from core.steps import (
    ConditionStatus,
    Cordon,
    Drain,
    EmitEvent,
    NodeFacts,
    RemoveDeviceTaints,
    RemoveTaint,
    RequestPermit,
    SetCondition,
    SetDeviceTaints,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    SetUnhealthyGpus,
    Step,
    Uncordon,
)
from remediation.plan.gpu_scope import (
    device_taint_gpus,
    node_taint_needed,
    partial_drain_gpus,
    single_gpu_fault,
)
from remediation.plan.recovery import RecoveryPlan, RecoveryRules, plan_recovery

__all__ = [
    "PlanResult",
    "RemediationMemory",
    "RemediationPolicy",
    "condition_status_for",
    "facts_after",
    "human_release_applies",
    "plan",
]

TESTING_TAINT = "testing"
"""Value of our taint while a deep diagnostic runs on a node without an open incident."""

_DRAINED_STATES = frozenset({NodeState.UNHEALTHY, NodeState.QUARANTINED})

_CONDITION_STATUS: dict[NodeState, ConditionStatus] = {
    NodeState.HEALTHY: "True",
    NodeState.DEGRADED: "True",
    NodeState.UNHEALTHY: "False",
    NodeState.QUARANTINED: "False",
    NodeState.UNKNOWN: "Unknown",
    NodeState.TESTING: "Unknown",
}


class RemediationPolicy(BaseModel):
    """What the agent may do to its node on its own (safe defaults: mark and taint on, cordon off)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mark: bool = Field(
        default=True, description="Set the GPUHealthy condition and the gpuhealth.io/state label."
    )
    taint: bool = Field(
        default=True, description="Taint gpuhealth.io/unhealthy=<action> while an incident is open."
    )
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Effect of our taint; NoExecute also evicts running pods."
    )
    cordon: bool = Field(
        default=False, description="Also cordon (spec.unschedulable) while an incident is open."
    )
    events: bool = Field(
        default=True, description="Record Kubernetes Events (reason GPUHealth*) on the node."
    )
    drain: bool = Field(
        default=False,
        description="Drain the node (with a permit) when an incident takes it out of service; then requeue.",
    )
    drain_deadline_s: float = Field(
        default=900.0, gt=0, description="The whole drain's deadline, in seconds (pods left then stay)."
    )
    gpu_quarantine: Literal["off", "instead", "before"] = Field(
        default="off",
        description="Per-GPU quarantine through DRA DeviceTaintRules: instead of the node taint for a fault "
        "of single GPUs, or before it (the node taint follows after node_taint_after_s); Kubernetes only.",
    )
    gpu_taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Effect of our device taints; NoExecute also evicts the GPU's pods."
    )
    node_taint_after_s: float = Field(
        default=3600.0,
        ge=0,
        description="gpu_quarantine before: seconds a single-GPU incident is open before the node taint too.",
    )
    partial_drain: bool = Field(
        default=False,
        description="A drain for a fault of single GPUs evicts only the pods bound to them (no cordon).",
    )


@dataclass(frozen=True)
class PlanResult:
    """The steps to apply (only changes), the planner's memory to keep, and notes for the log."""

    steps: list[Step]
    memory: RemediationMemory
    notes: list[str] = field(default_factory=list)


def condition_status_for(state: NodeState) -> ConditionStatus:
    """The GPUHealthy condition status that shows a node state."""
    return _CONDITION_STATUS[state]


def human_release_applies(incident: Incident, manual_release: str | None) -> bool:
    """True when the manual-release annotation names this incident, or is a time at or after its start."""
    if not manual_release:
        return False
    value = manual_release.strip()
    if value == incident.id:
        return True
    try:
        released_at = datetime.fromisoformat(value)
    except ValueError:
        return False
    if released_at.tzinfo is None:
        released_at = released_at.replace(tzinfo=UTC)
    return released_at >= incident.started_at


def plan(
    health: NodeHealth,
    facts: NodeFacts,
    policy: RemediationPolicy,
    memory: RemediationMemory,
    *,
    recovery: RecoveryRules | None = None,
    now: datetime | None = None,
) -> PlanResult:
    """The steps that bring the node from ``facts`` to what ``health`` and ``policy`` want; no others.

    ``recovery`` (None: off) adds the reset / reboot / validate rules of ``remediation/plan/recovery.py``;
    ``now`` times their backoff between attempts and the deadline of a requested reboot (None: neither).
    """
    if not facts.exists:
        return PlanResult(steps=[], memory=memory, notes=["node not found: nothing to change"])
    planner = _Planner(health, facts, policy, memory, now)
    planner.notice_humans()
    planner.device_taints()
    planner.taint()
    planner.cordon()
    planner.mark()
    planner.annotate()
    planner.announce()
    planner.drain()
    recovered = _recovery(health, facts, planner.memory, recovery, now)
    memory = planner.memory.model_copy(update={"recovery": recovered.record})
    return PlanResult(
        steps=[*planner.steps, *recovered.steps], memory=memory, notes=[*planner.notes, *recovered.notes]
    )


def _recovery(
    health: NodeHealth,
    facts: NodeFacts,
    memory: RemediationMemory,
    rules: RecoveryRules | None,
    now: datetime | None,
) -> RecoveryPlan:
    """``plan_recovery``, except for an incident drained only on its GPUs that now needs the whole node (it
    escalated to a reboot, or a node-level finding joined): its other GPUs' pods still run, so neither a
    reset nor a reboot goes ahead; the node taint is on, and a human drains the node."""
    incident = health.incident
    outgrown = (
        incident is not None and incident.id in memory.partially_drained and not single_gpu_fault(incident)
    )
    if rules is not None and incident is not None and outgrown:
        note = f"{incident.id} was drained only on its GPUs and now needs the whole node: no recovery"
        return RecoveryPlan(record=memory.recovery, notes=[note])
    return plan_recovery(health, facts, memory, rules, now)


def facts_after(facts: NodeFacts, steps: Iterable[Step]) -> NodeFacts:
    """The facts an executor would observe once ``steps`` succeeded (dry-run bookkeeping, tests)."""
    for step in steps:
        match step:
            case SetCondition(status=status, reason=reason, message=message):
                facts = replace(
                    facts, condition_status=status, condition_reason=reason, condition_message=message
                )
            case SetStateLabel(state=state):
                facts = replace(facts, state_label=state)
            case SetTaint(value=value, effect=effect):
                facts = replace(facts, taint_value=value, taint_effect=effect)
            case RemoveTaint():
                facts = replace(facts, taint_value=None, taint_effect=None)
            case Cordon():
                facts = replace(facts, unschedulable=True, cordoned_by_us=True)
            case Uncordon():
                facts = replace(facts, unschedulable=False, cordoned_by_us=False)
            case SetIncidentAnnotation(incident_id=incident_id):
                facts = replace(facts, incident_annotation=incident_id)
            case SetUnhealthyGpus(uuids=uuids):
                facts = replace(facts, unhealthy_gpus=uuids)
            case Drain(incident_id=incident_id):  # the cordon follows when the background drain runs
                facts = replace(facts, drained_incident=incident_id)
            case _:  # device taints leave the Node as it is; Events and permits leave everything as it is
                facts = _device_taint_facts(facts, step)
    return facts


def _device_taint_facts(facts: NodeFacts, step: Step) -> NodeFacts:
    if isinstance(step, RemoveDeviceTaints):
        return replace(facts, device_taint_gpus=(), device_taint_value=None, device_taint_effect=None)
    if isinstance(step, SetDeviceTaints):
        gpus, value, effect = step.gpus, step.value, step.effect
        return replace(facts, device_taint_gpus=gpus, device_taint_value=value, device_taint_effect=effect)
    return facts


class _Planner:
    """One planning pass; collects steps, notes and the updated memory."""

    def __init__(
        self,
        health: NodeHealth,
        facts: NodeFacts,
        policy: RemediationPolicy,
        memory: RemediationMemory,
        now: datetime | None,
    ) -> None:
        self.now = now
        self.health = health
        self.incident = health.incident
        self.facts = facts
        self.policy = policy
        self.memory = memory
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self._events: list[EmitEvent] = []

    # -- observations of what humans did ------------------------------------------------------------------

    def notice_humans(self) -> None:
        incident = self.incident
        if incident is None:
            return
        if not self.memory.overridden(incident.id) and human_release_applies(
            incident, self.facts.manual_release
        ):
            self._remember(human_released=remember(self.memory.human_released, incident.id))
            self.notes.append(f"a human released the node during {incident.id}: not re-tainting it")
        if (
            self.facts.cordoned_by_us
            and not self.facts.unschedulable
            and not self.memory.uncordoned_by_human(incident.id)
        ):
            self._remember(human_uncordoned=remember(self.memory.human_uncordoned, incident.id))
            self.notes.append(f"a human uncordoned the node during {incident.id}: not re-cordoning it")

    # -- desired state ---------------------------------------------------------------------------------

    def taint(self) -> None:
        incident = self.incident
        if incident is None and self.health.state is NodeState.TESTING:
            self._taint_for_diagnostic()
            return
        if not self.policy.taint:
            if self.facts.taint_value == TESTING_TAINT:  # a diagnostic's taint outlived its run
                self.steps.append(RemoveTaint())
            return
        if (
            incident is None
            or self.memory.overridden(incident.id)
            or not node_taint_needed(incident, self.facts, self.policy, self.now)
        ):
            if self.facts.taint_value is not None:
                self.steps.append(RemoveTaint())
            return
        wanted = (incident.action.value, self.policy.taint_effect)
        if (self.facts.taint_value, self.facts.taint_effect) == wanted:
            return
        if self.facts.taint_value is None and self.memory.active_incident == incident.id:
            self.notes.append(f"our taint is gone while {incident.id} is open: adding it back")
        self.steps.append(SetTaint(value=wanted[0], effect=wanted[1]))

    def device_taints(self) -> None:
        """Our DeviceTaintRules select the incident's GPUs that are DRA devices (policy.gpu_quarantine), and
        go with the incident or a human's release; first in the plan, so the GPU is out before the node."""
        incident = self.incident
        if self.facts.dra_gpus is None:
            if self.facts.device_taint_gpus and (incident is None or self.memory.overridden(incident.id)):
                self.steps.append(RemoveDeviceTaints())  # ours, left from when the GPUs were DRA devices
            return
        released = incident is None or self.memory.overridden(incident.id)
        wanted = () if incident is None or released else device_taint_gpus(incident, self.facts, self.policy)
        if not wanted or incident is None:
            if self.facts.device_taint_gpus:
                self.steps.append(RemoveDeviceTaints())
            return
        step = SetDeviceTaints(gpus=wanted, value=incident.action.value, effect=self.policy.gpu_taint_effect)
        facts = self.facts
        if (facts.device_taint_gpus, facts.device_taint_value, facts.device_taint_effect) != (
            step.gpus,
            step.value,
            step.effect,
        ):
            self.steps.append(step)

    def _taint_for_diagnostic(self) -> None:
        """A deep diagnostic stresses every GPU, so no pod may land meanwhile, whatever ``policy.taint``
        says: diagnostics are opt-in, and the taint goes when the run ends."""
        if (self.facts.taint_value, self.facts.taint_effect) != (TESTING_TAINT, "NoSchedule"):
            self.steps.append(SetTaint(value=TESTING_TAINT, effect="NoSchedule"))

    def cordon(self) -> None:
        incident = self.incident
        if incident is None or self.memory.overridden(incident.id):
            if self.facts.cordoned_by_us:
                self._uncordon()
            return
        if self.memory.uncordoned_by_human(incident.id):
            # Our annotation stays until the incident ends: it is how the next pass (or a restarted agent
            # that lost its memory) still recognises the human's uncordon instead of cordoning again.
            return
        if self.policy.cordon:
            self._cordon_for(incident)

    def _cordon_for(self, incident: Incident) -> None:
        if self.facts.unschedulable:
            if not self.facts.cordoned_by_us and self.memory.cordoned_for != incident.id:
                self.notes.append("the node is already cordoned by someone else: leaving that cordon theirs")
            return
        self.steps.append(Cordon())
        self._remember(cordoned_for=incident.id)

    def _uncordon(self) -> None:
        previous = self.memory.active_incident
        if self.facts.unschedulable and previous is not None and self.memory.uncordoned_by_human(previous):
            # A human lifted our cordon and cordoned again since: that cordon is theirs now.
            self.notes.append("the node was cordoned again by a human: leaving it cordoned")
            return
        self.steps.append(Uncordon())
        self._remember(cordoned_for=None)

    def mark(self) -> None:
        if not self.policy.mark:
            return
        status = condition_status_for(self.health.state)
        wanted = (status, self.health.reason, self.health.message)
        facts = self.facts
        if (facts.condition_status, facts.condition_reason, facts.condition_message) != wanted:
            self.steps.append(
                SetCondition(status=status, reason=self.health.reason, message=self.health.message)
            )
        if facts.state_label != self.health.state.value:
            self.steps.append(SetStateLabel(state=self.health.state.value))
        self._publish_unhealthy_gpus()

    def _publish_unhealthy_gpus(self) -> None:
        """Only where the executor publishes them (facts not None): Nomad's gpuhealth.unhealthy_gpus."""
        wanted = tuple(sorted(set(self.incident.gpus))) if self.incident is not None else ()
        if self.facts.unhealthy_gpus is not None and self.facts.unhealthy_gpus != wanted:
            self.steps.append(SetUnhealthyGpus(uuids=wanted))

    def annotate(self) -> None:
        wanted = self.incident.id if self.incident is not None else None
        if self.facts.incident_annotation != wanted:
            self.steps.append(SetIncidentAnnotation(incident_id=wanted))

    def drain(self) -> None:
        """Permit then drain, once per incident; last in the plan because the permit guards what follows."""
        incident = self.incident
        if not self.policy.drain or incident is None or incident.id in self._drain_excluded():
            return
        if self.health.state not in _DRAINED_STATES or not incident.action.takes_node_out_of_service:
            return
        if self.memory.overridden(incident.id) or self.memory.uncordoned_by_human(incident.id):
            self.notes.append(f"a human overrode {incident.id}: not draining the node")
            return
        gpus = partial_drain_gpus(incident, self.policy)
        self.steps.append(RequestPermit(purpose="drain", incident_id=incident.id, action=incident.action))
        self.steps.append(Drain(incident_id=incident.id, deadline_s=self.policy.drain_deadline_s, gpus=gpus))
        self._remember(drained=remember(self.memory.drained, incident.id))
        if gpus:
            self._remember(partially_drained=remember(self.memory.partially_drained, incident.id))

    def _drain_excluded(self) -> set[str]:
        """Incidents already drained, by our memory or by what the executor says it started."""
        started = {self.facts.drained_incident} if self.facts.drained_incident else set()
        return set(self.memory.drained) | started

    # -- events ------------------------------------------------------------------------------------------

    def announce(self) -> None:
        """Events follow from their keys alone: one whose key the loop forgot after a failure comes back."""
        incident = self.incident
        previous = self.memory.active_incident
        if previous is not None and (incident is None or incident.id != previous):
            self._event(
                "GPUHealthRecovered", f"{previous}/recovered", f"incident {previous} closed", "Normal"
            )
        if incident is not None:
            self._announce_open(incident)
            self._announce_overrides(incident)
            if previous != incident.id:
                self._remember(active_incident=incident.id)
        self.steps.extend(self._events)

    def _announce_open(self, incident: Incident) -> None:
        action = incident.action.value
        reasons = ", ".join(incident.reasons)
        prefix = f"{incident.id}/opened/"
        opened = next((key for key in self.memory.emitted_events if key.startswith(prefix)), None)
        if opened is None:
            quarantined = self.health.state is NodeState.QUARANTINED
            reason = "GPUHealthQuarantined" if quarantined else "GPUHealthUnhealthy"
            self._event(
                reason, prefix + action, f"incident {incident.id}: {reasons}; action {action}", "Warning"
            )
        elif opened.removeprefix(prefix) != action:
            text = f"incident {incident.id} escalated to {action}: {reasons}"
            self._event("GPUHealthEscalated", f"{incident.id}/escalated/{action}", text, "Warning")

    def _announce_overrides(self, incident: Incident) -> None:
        if self.memory.overridden(incident.id):
            key, text = f"{incident.id}/human-release", "released by a human: taint and cordon lifted"
            self._event("GPUHealthHumanOverride", key, text, "Normal")
        if self.memory.uncordoned_by_human(incident.id):
            key, text = f"{incident.id}/human-uncordon", "uncordoned by a human: not cordoning again"
            self._event("GPUHealthHumanOverride", key, text, "Normal")

    def _event(self, reason: str, key: str, message: str, kind: Literal["Normal", "Warning"]) -> None:
        if not self.policy.events or key in self.memory.emitted_events:
            return
        self._events.append(EmitEvent(reason=reason, message=message, key=key, type=kind))
        self._remember(emitted_events=remember(self.memory.emitted_events, key))

    def _remember(self, **changes: object) -> None:
        self.memory = self.memory.model_copy(update=changes)
