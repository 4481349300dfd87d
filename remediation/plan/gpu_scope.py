"""Pure rules of per-GPU quarantine and the partial drain: when a fault belongs to single GPUs, which GPUs
get a device taint, and when the node taint is needed all the same (docs/gpu-quarantine.md).

A fault *of single GPUs* is an open incident that names GPUs, whose every latest finding names a GPU (no
node-level finding such as a missing GPU, a fabric port or a human's quarantine), and whose action does not
restart the whole node (``reboot``): taking the other GPUs away for it helps nobody. ``replace`` of one GPU
is still single-GPU: the node serves on its healthy GPUs until a human schedules the repair.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from core.findings import Action
from core.health import Incident
from core.steps import NodeFacts

_NODE_WIDE_ACTIONS = frozenset({Action.REBOOT})


class GpuScopePolicy(Protocol):
    """The policy fields these rules read (``RemediationPolicy`` has them)."""

    @property
    def gpu_quarantine(self) -> Literal["off", "instead", "before"]: ...

    @property
    def node_taint_after_s(self) -> float: ...

    @property
    def partial_drain(self) -> bool: ...


def single_gpu_fault(incident: Incident) -> bool:
    """Whether the incident belongs to the GPUs it names rather than to the whole node."""
    if not incident.gpus or incident.action in _NODE_WIDE_ACTIONS:
        return False
    return all(finding.gpu for finding in incident.findings)


def device_taint_gpus(incident: Incident, facts: NodeFacts, policy: GpuScopePolicy) -> tuple[str, ...]:
    """The incident's GPUs that get our DeviceTaintRule: those the DRA driver publishes, when it is on."""
    if policy.gpu_quarantine == "off" or facts.dra_gpus is None:
        return ()
    return tuple(sorted(set(incident.gpus) & set(facts.dra_gpus)))


def node_taint_needed(
    incident: Incident, facts: NodeFacts, policy: GpuScopePolicy, now: datetime | None
) -> bool:
    """Whether the open incident needs the node taint: always, unless per-GPU quarantine is on, the fault is
    of single GPUs and every one of them is a DRA device of this node (then device taints cover it); with
    ``before``, the node taint follows once the incident has been open ``node_taint_after_s`` (``now``
    None: the time is not known, so not yet)."""
    if policy.gpu_quarantine == "off" or facts.dra_gpus is None or not single_gpu_fault(incident):
        return True
    if not set(incident.gpus) <= set(facts.dra_gpus):
        return True
    if policy.gpu_quarantine == "instead" or now is None:
        return False
    return (now - incident.started_at).total_seconds() >= policy.node_taint_after_s


def partial_drain_gpus(incident: Incident, policy: GpuScopePolicy) -> tuple[str, ...]:
    """The GPUs a drain for this incident is limited to (``Drain.gpus``); empty drains the whole node."""
    if not policy.partial_drain or not single_gpu_fault(incident):
        return ()
    return tuple(sorted(set(incident.gpus)))
