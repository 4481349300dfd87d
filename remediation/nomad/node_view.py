"""gpuhealth's view of a Nomad node: the metadata keys we own, and ``NodeFacts`` from a node object.

Nomad has no node conditions, labels, taints or annotations; dynamic node metadata (``/v1/client/metadata``)
stands in for all of them, so jobs can constrain on ``${meta.gpuhealth.state}``. Eligibility stands in for
the taint and the cordon, and the keys below record that *we* made the node ineligible, so a human's
ineligibility is never undone and ours is always restored. Pure functions over plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from core.steps import ConditionStatus, NodeFacts, TaintEffect

# The contract's keys (docs/nomad.md, "What the agent does to its node").
STATE: Final = "gpuhealth.state"
INCIDENT: Final = "gpuhealth.incident"
UNHEALTHY_GPUS: Final = "gpuhealth.unhealthy_gpus"
# Our own bookkeeping keys: what the Kubernetes executor keeps in the condition and annotations.
CONDITION: Final = "gpuhealth.condition"  # True / False / Unknown, as the GPUHealthy condition would say
REASON: Final = "gpuhealth.reason"
MESSAGE: Final = "gpuhealth.message"
QUARANTINE: Final = "gpuhealth.quarantine"  # "<action>:<effect>" while our quarantine (the taint) holds
CORDONED: Final = "gpuhealth.cordoned"  # "true" while our cordon holds
INELIGIBLE_BY: Final = "gpuhealth.ineligible_by"  # "gpuhealth" when the node was eligible and we changed it
DRAINED: Final = "gpuhealth.drained"  # the incident whose drain we started (never twice, across restarts)
REQUEUED: Final = "gpuhealth.requeued"  # the incident whose batch jobs we requeued
MANUAL_RELEASE: Final = "gpuhealth.manual_release"  # set by a human: incident id or timestamp
DRAIN_META_INCIDENT: Final = "gpuhealth.incident"  # the drain's own Meta (LastDrain.Meta) names the incident
OWNER: Final = "gpuhealth"

INELIGIBLE: Final = "ineligible"
ELIGIBLE: Final = "eligible"

_CONDITION_STATUSES: Final = frozenset({"True", "False", "Unknown"})
_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def meta_of(node: Mapping[str, Any]) -> dict[str, str]:
    """The node's ``Meta`` (static and dynamic merged, as the servers hold it)."""
    meta = node.get("Meta")
    if not isinstance(meta, Mapping):
        return {}
    return {str(key): str(value) for key, value in meta.items() if value is not None}


def is_ineligible(node: Mapping[str, Any]) -> bool:
    """Whether the scheduler places nothing new on the node (ineligible, or draining)."""
    return node.get("SchedulingEligibility") == INELIGIBLE


def is_draining(node: Mapping[str, Any]) -> bool:
    """Whether a drain is in progress (``DrainStrategy`` set; Nomad clears it when the drain completes)."""
    return bool(node.get("DrainStrategy"))


def quarantine_value(value: str, effect: str) -> str:
    """What ``gpuhealth.quarantine`` holds for our taint-equivalent."""
    return f"{value}:{effect}"


def split_gpus(value: str | None) -> tuple[str, ...]:
    """``gpuhealth.unhealthy_gpus`` (comma-separated UUIDs) as a sorted tuple."""
    if not value:
        return ()
    return tuple(sorted({part.strip() for part in value.split(",") if part.strip()}))


def node_facts(node: Mapping[str, Any] | None) -> NodeFacts:
    """What the planner needs to know about the node; None (not found) gives ``exists=False``."""
    if node is None:
        return NodeFacts(exists=False)
    meta = meta_of(node)
    ineligible = is_ineligible(node)
    taint_value, taint_effect = _quarantine(meta.get(QUARANTINE)) if ineligible else (None, None)
    condition = meta.get(CONDITION)
    return NodeFacts(
        exists=True,
        condition_status=cast(ConditionStatus, condition) if condition in _CONDITION_STATUSES else None,
        condition_reason=meta.get(REASON),
        condition_message=meta.get(MESSAGE),
        state_label=meta.get(STATE),
        taint_value=taint_value,
        taint_effect=taint_effect,
        unschedulable=ineligible,
        cordoned_by_us=meta.get(CORDONED) == "true",
        incident_annotation=meta.get(INCIDENT),
        manual_release=meta.get(MANUAL_RELEASE),
        drained_incident=meta.get(DRAINED),
        unhealthy_gpus=split_gpus(meta.get(UNHEALTHY_GPUS)),
        drain_finished_incident=finished_drain(node, meta.get(DRAINED)),
    )


def finished_drain(node: Mapping[str, Any], drained: str | None) -> str | None:
    """The incident of our drain once Nomad says it ended (``LastDrain`` names it and is not draining)."""
    last = node.get("LastDrain")
    if not drained or is_draining(node) or not isinstance(last, Mapping):
        return None
    meta = last.get("Meta")
    named = meta.get(DRAIN_META_INCIDENT) if isinstance(meta, Mapping) else None
    return drained if named == drained and last.get("Status") != "draining" else None


def _quarantine(value: str | None) -> tuple[str | None, TaintEffect | None]:
    """Our quarantine as (value, effect); a node made eligible again by someone shows none (drift)."""
    if not value:
        return None, None
    action, _, effect = value.rpartition(":")
    if effect not in _TAINT_EFFECTS:
        return value, "NoSchedule"
    return action, cast(TaintEffect, effect)
