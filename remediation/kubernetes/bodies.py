"""Request bodies for each plan step: pure functions from (step, current node, now) to plain JSON dicts.

Plain dicts rather than client models, because ``V1Taint.to_dict()`` and friends give snake_case keys and
explicit nulls, which a patch would send as "delete this field".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core.steps import EmitEvent, SetCondition, SetTaint
from remediation.kubernetes.names import (
    CONDITION_TYPE,
    CORDONED_ANNOTATION,
    EVENT_NAMESPACE,
    INCIDENT_ANNOTATION,
    STATE_LABEL,
    TAINT_KEY,
)
from remediation.kubernetes.node_view import JsonObject, our_condition, resource_version_of, taints_of


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes ``metav1.Time``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_version(body: JsonObject, node: Mapping[str, Any]) -> JsonObject:
    """Add ``metadata.resourceVersion`` so a concurrent writer makes the API server answer 409."""
    version = resource_version_of(node)
    if version is not None:
        body.setdefault("metadata", {})["resourceVersion"] = version
    return body


def condition_unchanged(step: SetCondition, node: Mapping[str, Any]) -> bool:
    """True when our condition already says exactly this (no write: heartbeats alone are not worth one)."""
    current = our_condition(node)
    return current is not None and (
        current.get("status"),
        current.get("reason"),
        current.get("message"),
    ) == (step.status, step.reason, step.message)


def condition_patch(step: SetCondition, node: Mapping[str, Any], now: datetime) -> JsonObject:
    """Strategic merge patch of ``status.conditions`` (merged by type, so Ready and the rest survive).

    ``lastTransitionTime`` moves only when the status changes; otherwise the existing one is carried.
    """
    current = our_condition(node)
    stamp = format_time(now)
    transition = stamp
    if current is not None and current.get("status") == step.status and current.get("lastTransitionTime"):
        transition = str(current["lastTransitionTime"])
    condition = {
        "type": CONDITION_TYPE,
        "status": step.status,
        "reason": step.reason,
        "message": step.message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": transition,
    }
    return _with_version({"status": {"conditions": [condition]}}, node)


def label_patch(state: str) -> JsonObject:
    """Set ``gpuhealth.io/state``."""
    return {"metadata": {"labels": {STATE_LABEL: state}}}


def incident_patch(incident_id: str | None) -> JsonObject:
    """Set ``gpuhealth.io/incident``; None deletes it (null in a merge patch removes the key)."""
    return {"metadata": {"annotations": {INCIDENT_ANNOTATION: incident_id}}}


def _our_taint(step: SetTaint, now: datetime) -> JsonObject:
    taint: JsonObject = {"key": TAINT_KEY, "value": step.value, "effect": step.effect}
    if step.effect == "NoExecute":
        # The taint manager measures tolerationSeconds from timeAdded; the API server requires it here.
        taint["timeAdded"] = format_time(now)
    return taint


def taints_with_ours(node: Mapping[str, Any], step: SetTaint, now: datetime) -> list[JsonObject] | None:
    """The node's taints with ours set to ``step`` (in place, others untouched); None when already so."""
    taints = taints_of(node)
    ours = [t for t in taints if t.get("key") == TAINT_KEY]
    if len(ours) == 1 and (ours[0].get("value"), ours[0].get("effect")) == (step.value, step.effect):
        return None
    desired = _our_taint(step, now)
    result: list[JsonObject] = []
    for taint in taints:
        if taint.get("key") != TAINT_KEY:
            result.append(taint)
        elif desired not in result:
            result.append(desired)  # keep our taint where it was, and only once
    if desired not in result:
        result.append(desired)
    return result


def taints_without_ours(node: Mapping[str, Any]) -> list[JsonObject] | None:
    """The node's taints minus ours (order kept); None when ours is not there."""
    taints = taints_of(node)
    remaining = [t for t in taints if t.get("key") != TAINT_KEY]
    return None if len(remaining) == len(taints) else remaining


def taints_patch(node: Mapping[str, Any], taints: list[JsonObject]) -> JsonObject:
    """Replace the atomic ``spec.taints`` list, guarded by the resourceVersion it was read at."""
    return _with_version({"spec": {"taints": taints}}, node)


def cordon_patch() -> JsonObject:
    """Mark the node unschedulable and record that gpuhealth did it."""
    return {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "true"}}}


def uncordon_patch(node: Mapping[str, Any]) -> JsonObject:
    """Clear ``spec.unschedulable`` and our annotation, guarded so a concurrent human change gives 409."""
    body = {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}}
    return _with_version(body, node)


def event_name(node_name: str, key: str) -> str:
    """A deterministic Event name: the same key always names the same Event (restarts do not duplicate)."""
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"{node_name}.gpuhealth.{digest}"


def event_body(
    step: EmitEvent, *, node_name: str, node_uid: str | None, component: str, now: datetime
) -> JsonObject:
    """A core/v1 Event about the node, shaped like the ones kubelet records."""
    stamp = format_time(now)
    involved: JsonObject = {"kind": "Node", "apiVersion": "v1", "name": node_name}
    if node_uid is not None:
        involved["uid"] = node_uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(node_name, step.key), "namespace": EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": step.reason,
        "message": step.message,
        "type": step.type,
        "source": {"component": component, "host": node_name},
        "reportingComponent": component,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
