"""What the workload controllers (JobSet, TrainJob, PyTorchJob, Kueue, Volcano) share.

- :func:`serves`: the workload controllers run by default but do nothing on a server that does not serve
  their custom resources (``KubeSim(workloads=True)`` registers them).
- Foreground cascading deletion ("Garbage Collection", https://kubernetes.io/docs/concepts/architecture/
  garbage-collection/#foreground-deletion): the owner gets ``deletionTimestamp`` and the
  ``foregroundDeletion`` finalizer, its dependents are deleted, and the owner goes once none is left.
  The emulator has no general garbage collector, so :class:`ForegroundDeletion` does this for the owners
  the workload controllers delete (JobSet restarts delete their child Jobs this way).
- :func:`record_event`: a core/v1 Event about an object, as a controller's event recorder writes it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    format_time,
    graceful_delete,
    is_terminal,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    termination_grace,
    try_update,
    uid_of,
    writable,
)
from sim.kube.protocols import KubeObject, ObjectStore

log = structlog.get_logger(__name__)

FOREGROUND_FINALIZER = "foregroundDeletion"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

# Owner resource -> the resources its dependents live in. Only these pairs cascade (see module docstring).
_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "jobs.batch": ("pods",),
    "jobsets.jobset.x-k8s.io": ("jobs.batch",),
    "trainjobs.trainer.kubeflow.org": ("jobsets.jobset.x-k8s.io",),
    "pytorchjobs.kubeflow.org": ("pods",),
    "jobs.batch.volcano.sh": ("pods",),
}


def serves(store: ObjectStore, *resources: str) -> bool:
    """Whether the store serves every named resource (a store without a registry is assumed to)."""
    registry = getattr(store, "registry", None)
    if registry is None:
        return True
    try:
        for resource in resources:
            registry.by_key(resource)
    except LookupError:
        return False
    return True


def owned_by(objects: Iterable[KubeObject], owner_uid: str) -> list[KubeObject]:
    """The objects whose ownerReferences name ``owner_uid``."""
    return [
        obj
        for obj in objects
        if any(ref.get("uid") == owner_uid for ref in meta(obj).get("ownerReferences") or [])
    ]


def group_by_controller(objects: Iterable[KubeObject], kind: str) -> dict[str, list[KubeObject]]:
    """Objects keyed by the uid of their controller ownerReference of ``kind``."""
    grouped: dict[str, list[KubeObject]] = {}
    for obj in objects:
        for ref in meta(obj).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == kind:
                grouped.setdefault(str(ref.get("uid")), []).append(obj)
    return grouped


def foreground_delete(store: ObjectStore, resource: str, obj: Mapping[str, Any]) -> None:
    """DELETE with ``propagationPolicy: Foreground``: mark the owner; dependents go first."""
    if is_terminating(obj):
        return
    marked = writable(dict(obj))
    finalizers = list(marked["metadata"].get("finalizers") or [])
    if FOREGROUND_FINALIZER not in finalizers:
        marked["metadata"]["finalizers"] = [*finalizers, FOREGROUND_FINALIZER]
        if try_update(store, resource, marked) is None:
            return
    graceful_delete(store, resource, obj, 0)


def release_pod(store: ObjectStore, pod: KubeObject) -> None:
    """Drop the Job-tracking finalizer of a pod whose Job is going away (the Job controller does this for
    orphaned pods), so the pod can leave the store."""
    finalizers = meta(pod).get("finalizers") or []
    if JOB_TRACKING_FINALIZER in finalizers:
        released = writable(pod)
        released["metadata"]["finalizers"] = [f for f in finalizers if f != JOB_TRACKING_FINALIZER]
        try_update(store, "pods", released)


def delete_pod(store: ObjectStore, pod: KubeObject) -> None:
    """Delete a pod gracefully (its own grace period), as a controller's DELETE does."""
    if not is_terminating(pod):
        graceful_delete(store, "pods", pod, 0 if is_terminal(pod) else termination_grace(pod))


class ForegroundDeletion:
    """Finishes foreground deletions of workload owners: deletes dependents, then drops the finalizer."""

    name = "foreground-deletion"

    def reconcile(self, store: ObjectStore) -> None:
        """Advance every owner marked with the ``foregroundDeletion`` finalizer."""
        cache = cache_for(store)
        for resource, dependent_resources in _DEPENDENTS.items():
            if not serves(store, resource, *dependent_resources):
                continue
            for owner in cache.list(resource):
                if is_terminating(owner) and FOREGROUND_FINALIZER in (meta(owner).get("finalizers") or []):
                    self._advance(store, resource, owner, dependent_resources)

    def _advance(
        self, store: ObjectStore, resource: str, owner: KubeObject, dependent_resources: tuple[str, ...]
    ) -> None:
        cache = cache_for(store)
        remaining = 0
        for dependent_resource in dependent_resources:
            for dependent in owned_by(cache.list(dependent_resource, namespace_of(owner)), uid_of(owner)):
                remaining += 1
                if dependent_resource == "pods":
                    release_pod(store, dependent)
                    delete_pod(store, dependent)
                else:
                    foreground_delete(store, dependent_resource, dependent)
        if remaining == 0:
            done = writable(owner)
            done["metadata"]["finalizers"] = [
                f for f in meta(owner).get("finalizers") or [] if f != FOREGROUND_FINALIZER
            ]
            try_update(store, resource, done)


def record_event(
    store: ObjectStore, obj: Mapping[str, Any], event_type: str, reason: str, message: str, *, component: str
) -> None:
    """Write a core/v1 Event about ``obj`` (what client-go's event recorder sends)."""
    now = format_time(store)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name_of(obj)}.{secrets.token_hex(8)}",
            "namespace": namespace_of(obj) or "default",
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name_of(obj),
            "namespace": namespace_of(obj),
            "uid": uid_of(obj),
        },
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        store.create("events", event)
    except KeyError:
        log.debug("event not recorded", reason=reason, name=name_of(obj))
