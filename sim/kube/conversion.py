"""Resources served in two API groups over one stored object: ``events.k8s.io/v1`` Events over core ``v1``.

The API server stores one Event and converts between the two versions ("Event v1 (events.k8s.io)" in the
API reference, https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/): an event
written through either group is read through both. The renamed fields are ``regarding`` /
``involvedObject``, ``note`` / ``message``, ``reportingController`` / ``reportingComponent``,
``deprecatedSource`` / ``source``, ``deprecatedFirstTimestamp`` / ``firstTimestamp``,
``deprecatedLastTimestamp`` / ``lastTimestamp`` and ``deprecatedCount`` / ``count``; the rest keep their
names.
"""

from __future__ import annotations

from sim.kube.protocols import KubeObject
from sim.kube.resources import ResourceType, group_version

# events.k8s.io/v1 name -> core/v1 name
_EVENT_RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_RENAMES_BACK = {core: view for view, core in _EVENT_RENAMES.items()}


def _renamed(obj: KubeObject, renames: dict[str, str]) -> KubeObject:
    return {renames.get(key, key): value for key, value in obj.items()}


def to_stored(resource_type: ResourceType, obj: KubeObject) -> KubeObject:
    """The stored (core) form of an object written through ``resource_type``."""
    if not resource_type.stored_as:
        return obj
    stored = _renamed(obj, _EVENT_RENAMES)
    stored["apiVersion"], stored["kind"] = "v1", "Event"
    return stored


def from_stored(resource_type: ResourceType, obj: KubeObject, version: str) -> KubeObject:
    """The object as ``resource_type`` serves it at ``version``."""
    if not resource_type.stored_as:
        return {**obj, "apiVersion": group_version(resource_type.group, version)}
    view = _renamed(obj, _EVENT_RENAMES_BACK)
    view["apiVersion"] = group_version(resource_type.group, version)
    view["kind"] = resource_type.kind
    return view
