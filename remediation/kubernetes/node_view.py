"""Read gpuhealth's view of a Node (a plain JSON dict as the API server sends it) into ``NodeFacts``.

Pure functions over dicts: the watch cache, the executor's fresh reads and the tests share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from core.steps import ConditionStatus, NodeFacts, TaintEffect
from remediation.kubernetes.names import (
    CONDITION_TYPE,
    CORDONED_ANNOTATION,
    INCIDENT_ANNOTATION,
    MANUAL_RELEASE_ANNOTATION,
    STATE_LABEL,
    TAINT_KEY,
)

JsonObject = dict[str, Any]

_CONDITION_STATUSES: frozenset[str] = frozenset({"True", "False", "Unknown"})
_TAINT_EFFECTS: frozenset[str] = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def _section(node: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = node.get(name)
    return value if isinstance(value, Mapping) else {}


def _string_map(metadata: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = metadata.get(name)
    return value if isinstance(value, Mapping) else {}


def conditions_of(node: Mapping[str, Any]) -> list[JsonObject]:
    """``status.conditions`` of a node (empty when absent)."""
    conditions = _section(node, "status").get("conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


def our_condition(node: Mapping[str, Any]) -> JsonObject | None:
    """The ``GPUHealthy`` condition, or None."""
    return next((c for c in conditions_of(node) if c.get("type") == CONDITION_TYPE), None)


def taints_of(node: Mapping[str, Any]) -> list[JsonObject]:
    """``spec.taints`` of a node, in order (empty when absent)."""
    taints = _section(node, "spec").get("taints")
    return [t for t in taints if isinstance(t, dict)] if isinstance(taints, list) else []


def our_taint(node: Mapping[str, Any]) -> JsonObject | None:
    """Our ``gpuhealth.io/unhealthy`` taint, or None (the first one if a human added several effects)."""
    return next((t for t in taints_of(node) if t.get("key") == TAINT_KEY), None)


def annotations_of(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata.annotations`` (empty when absent)."""
    return _string_map(_section(node, "metadata"), "annotations")


def resource_version_of(node: Mapping[str, Any]) -> str | None:
    """``metadata.resourceVersion``, the optimistic-concurrency token sent back with atomic list edits."""
    value = _section(node, "metadata").get("resourceVersion")
    return str(value) if value is not None else None


def uid_of(node: Mapping[str, Any]) -> str | None:
    """``metadata.uid`` (Events reference the node by it)."""
    value = _section(node, "metadata").get("uid")
    return str(value) if value is not None else None


def _optional_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def node_facts(node: Mapping[str, Any] | None) -> NodeFacts:
    """What the planner needs to know about the node; a missing node gives ``exists=False``."""
    if node is None:
        return NodeFacts(exists=False)
    condition = our_condition(node) or {}
    status = condition.get("status")
    taint = our_taint(node) or {}
    effect = taint.get("effect")
    annotations = annotations_of(node)
    labels = _string_map(_section(node, "metadata"), "labels")
    return NodeFacts(
        exists=True,
        condition_status=cast(ConditionStatus, status) if status in _CONDITION_STATUSES else None,
        condition_reason=_optional_str(condition.get("reason")),
        condition_message=_optional_str(condition.get("message")),
        state_label=_optional_str(labels.get(STATE_LABEL)),
        taint_value=_optional_str(taint.get("value", "")) if taint else None,
        taint_effect=cast(TaintEffect, effect) if effect in _TAINT_EFFECTS else None,
        unschedulable=bool(_section(node, "spec").get("unschedulable", False)),
        cordoned_by_us=annotations.get(CORDONED_ANNOTATION) == "true",
        incident_annotation=_optional_str(annotations.get(INCIDENT_ANNOTATION)),
        manual_release=_optional_str(annotations.get(MANUAL_RELEASE_ANNOTATION)),
    )
