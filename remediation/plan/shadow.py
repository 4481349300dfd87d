"""Shadow mode: decide everything, write only what the acting policy allows, record the rest.

A profile in shadow (``remediation/plan/profiles.py``) plans with its full mode, as it would run live; the
steps its acting policy (``shadow_writes``, default ``observe``: nothing) does not allow are not sent to the
orchestrator but recorded as shadow decisions with their reason ("would have drained node-7 at 12:03:
XID_79"). The planner then sees the node as if those steps had been applied (an overlay of facts), so a shadow
taint is decided once, not again every pass, and the shadow timeline reads like the live one would.

A shadowed ``RequestPermit`` never reaches the aggregator: a shadow drain takes no share of the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from core.health import NodeHealth
from core.steps import (
    Cordon,
    Drain,
    EmitEvent,
    NodeFacts,
    Reboot,
    RemoveDeviceTaints,
    RemoveTaint,
    RequestPermit,
    Requeue,
    Reset,
    SetCondition,
    SetDeviceTaints,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    SetUnhealthyGpus,
    Step,
    Uncordon,
    Validate,
    WithdrawReboot,
)
from remediation.plan.planner import RemediationPolicy, facts_after

_SLOTS: dict[type, str] = {
    SetTaint: "taint",
    RemoveTaint: "taint",
    Cordon: "cordon",
    Uncordon: "cordon",
    SetDeviceTaints: "device",
    RemoveDeviceTaints: "device",
    SetCondition: "condition",
    SetStateLabel: "label",
    SetIncidentAnnotation: "annotation",
    SetUnhealthyGpus: "gpus",
    Drain: "drain",
}
_RECOVERY = (Reset, Reboot, Validate, WithdrawReboot)

_VERBS: dict[type, str] = {
    SetTaint: "tainted",
    RemoveTaint: "untainted",
    Cordon: "cordoned",
    Uncordon: "uncordoned",
    SetDeviceTaints: "tainted GPUs of",
    RemoveDeviceTaints: "untainted GPUs of",
    SetCondition: "set the GPUHealthy condition on",
    SetStateLabel: "labelled",
    SetIncidentAnnotation: "annotated",
    SetUnhealthyGpus: "published the unhealthy GPUs of",
    EmitEvent: "recorded an Event on",
    RequestPermit: "asked a permit for",
    Drain: "drained",
    Requeue: "requeued the jobs of",
    Reset: "reset GPUs of",
    Reboot: "rebooted",
    Validate: "validated",
    WithdrawReboot: "withdrew the reboot of",
}


def allowed(step: Step, acting: RemediationPolicy, *, recovery: bool) -> bool:
    """Whether the acting policy writes ``step`` for real (``recovery``: resets and reboots allowed)."""
    if isinstance(step, RequestPermit):
        return acting.drain if step.purpose == "drain" else recovery
    if isinstance(step, _RECOVERY):
        return recovery
    rules: tuple[tuple[tuple[type, ...], bool], ...] = (
        ((SetCondition, SetStateLabel, SetIncidentAnnotation, SetUnhealthyGpus), acting.mark),
        ((SetTaint, RemoveTaint, SetDeviceTaints, RemoveDeviceTaints), acting.taint),
        ((Cordon, Uncordon), acting.cordon),
        ((EmitEvent,), acting.events),
        ((Drain, Requeue), acting.drain),
    )
    return next((allow for kinds, allow in rules if isinstance(step, kinds)), False)


def describe(step: Step, node: str, at: datetime, health: NodeHealth) -> str:
    """One line: what would have been done, to which node, when, and why (the incident's reasons)."""
    verb = _VERBS.get(type(step), type(step).__name__)
    incident = health.incident
    why = ", ".join(incident.reasons) if incident is not None and incident.reasons else health.reason
    detail = f" {step.value}" if isinstance(step, SetTaint) else ""
    return f"would have {verb} {node}{detail} at {at.strftime('%H:%M:%S')}: {why}"


class ShadowGate:
    """Splits a plan into what is written and what is only recorded; keeps the shadow's view of the node."""

    def __init__(self, acting: RemediationPolicy, *, recovery: bool = False) -> None:
        self.acting = acting
        self.recovery = recovery
        self._overlay: dict[str, Step] = {}

    def facts(self, real: NodeFacts) -> NodeFacts:
        """The node as the shadow decisions so far would have left it."""
        return facts_after(real, self._overlay.values()) if real.exists else real

    def split(self, steps: Sequence[Step]) -> tuple[list[Step], list[Step]]:
        """(steps to write, steps only recorded); the recorded ones join the overlay."""
        written: list[Step] = []
        shadowed: list[Step] = []
        for step in steps:
            if allowed(step, self.acting, recovery=self.recovery):
                written.append(step)
                continue
            shadowed.append(step)
            slot = _SLOTS.get(type(step))
            if slot is not None:
                self._overlay.pop(slot, None)
                self._overlay[slot] = step
        return written, shadowed
