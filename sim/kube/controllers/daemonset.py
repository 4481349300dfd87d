"""The DaemonSet controller: one pod per eligible node.

Follows "DaemonSet" (https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/): the controller
creates one pod per node that matches the pod template's ``nodeSelector`` / node affinity and whose
NoSchedule and NoExecute taints the pod tolerates, pinning each pod with a ``matchFields`` node affinity
on ``metadata.name`` and leaving the binding to the default scheduler ("How Daemon Pods are scheduled").
It adds the tolerations listed under "Taints and tolerations" (not-ready and unreachable NoExecute;
disk-, memory-, pid-pressure and unschedulable NoSchedule; network-unavailable for host-network pods).
A pod whose node no longer matches, or that is Failed, is deleted (and replaced if still wanted).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sim.kube.controllers.cache import ChangeGate, cache_for
from sim.kube.controllers.common import (
    controller_ref,
    graceful_delete,
    is_terminating,
    name_of,
    namespace_of,
    node_matches_pod,
    owner_reference,
    phase_of,
    termination_grace,
    try_update,
    uid_of,
    untolerated,
    writable,
)
from sim.kube.disruption import is_pod_ready
from sim.kube.protocols import KubeObject, ObjectStore

_DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
_HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def daemon_pod_spec(template_spec: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    """The template's pod spec with the DaemonSet tolerations added and a node affinity to ``node_name``."""
    spec = copy.deepcopy(dict(template_spec))
    tolerations = list(spec.get("tolerations") or [])
    extra = [*_DAEMON_TOLERATIONS, *([_HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])]
    for toleration in extra:
        if not any(
            t.get("key") == toleration["key"] and t.get("effect") == toleration["effect"] for t in tolerations
        ):
            tolerations.append(dict(toleration))
    spec["tolerations"] = tolerations
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    affinity = spec.setdefault("affinity", {})
    affinity["nodeAffinity"] = {
        **(affinity.get("nodeAffinity") or {}),
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
    }
    return spec


def _should_run(spec: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """(should run, may continue running) as NodeShouldRunDaemonPod answers them."""
    if not node_matches_pod(spec, node):
        return False, False
    tolerations = list(spec.get("tolerations") or []) + _DAEMON_TOLERATIONS
    taints = list((node.get("spec") or {}).get("taints") or [])
    continues = not untolerated(taints, tolerations, ("NoExecute",))
    return continues and not untolerated(taints, tolerations, ("NoSchedule",)), continues


def _pod_node(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


class DaemonSetController:
    """Keeps exactly one pod of every DaemonSet on each node that should run it."""

    name = "daemonset"

    def __init__(self) -> None:
        # Neither spec nor status depends on time: a pass after no change would repeat the last one.
        self._gate = ChangeGate()

    def reconcile(self, store: ObjectStore) -> None:
        """Create missing daemon pods, delete misplaced or failed ones, and refresh status counts."""
        cache = cache_for(store)
        if self._gate.unchanged(cache):
            return
        generation = cache.generation
        daemonsets = cache.list("daemonsets.apps")
        self._gate.mark(cache, generation)
        if not daemonsets:
            return
        nodes = cache.list("nodes")
        pods_by_owner: dict[str, list[KubeObject]] = {}
        for pod in cache.list("pods"):
            owner = controller_ref(pod)
            if owner is not None and owner.get("kind") == "DaemonSet":
                pods_by_owner.setdefault(str(owner.get("uid")), []).append(pod)
        for daemonset in daemonsets:
            if not is_terminating(daemonset):
                self._sync(store, daemonset, nodes, pods_by_owner.get(uid_of(daemonset), []))

    def _sync(
        self, store: ObjectStore, ds: KubeObject, nodes: list[KubeObject], pods: list[KubeObject]
    ) -> None:
        template = ((ds.get("spec") or {}).get("template")) or {}
        template_spec = template.get("spec") or {}
        by_node: dict[str, list[KubeObject]] = {}
        for pod in pods:
            by_node.setdefault(_pod_node(pod), []).append(pod)
        counts = {"desired": 0, "scheduled": 0, "misscheduled": 0, "ready": 0}
        for node in nodes:
            node_name = name_of(node)
            should_run, may_continue = _should_run(template_spec, node)
            present = [p for p in by_node.pop(node_name, []) if not is_terminating(p)]
            failed = [p for p in present if phase_of(p) == "Failed"]
            for pod in failed:
                graceful_delete(store, "pods", pod, 0)
            alive = [p for p in present if p not in failed]
            if should_run:
                counts["desired"] += 1
            if alive and not may_continue:
                for pod in alive:
                    graceful_delete(store, "pods", pod, termination_grace(pod))
                counts["misscheduled"] += 1
                continue
            if alive:
                counts["scheduled"] += 1
                counts["ready"] += int(any(is_pod_ready(p) for p in alive))
                for extra in alive[1:]:  # more than one pod on a node: keep the first
                    graceful_delete(store, "pods", extra, termination_grace(extra))
            elif should_run:
                self._create_pod(store, ds, template, node_name)
        for leftovers in by_node.values():  # pods of nodes that are gone
            for pod in leftovers:
                if not is_terminating(pod):
                    graceful_delete(store, "pods", pod, 0)
        self._write_status(store, ds, counts)

    @staticmethod
    def _create_pod(store: ObjectStore, ds: KubeObject, template: Mapping[str, Any], node_name: str) -> None:
        template_meta = template.get("metadata") or {}
        generation = (ds.get("metadata") or {}).get("generation") or 1
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{name_of(ds)}-",
                "namespace": namespace_of(ds),
                "labels": {**(template_meta.get("labels") or {}), "pod-template-generation": str(generation)},
                "annotations": dict(template_meta.get("annotations") or {}),
                "ownerReferences": [owner_reference(ds, "apps/v1", "DaemonSet")],
            },
            "spec": daemon_pod_spec(template.get("spec") or {}, node_name),
            "status": {"phase": "Pending"},
        }
        try:
            store.create("pods", pod)
        except KeyError:
            return  # the namespace is going away, or a name clash: try again on the next reconcile

    @staticmethod
    def _write_status(store: ObjectStore, ds: KubeObject, counts: dict[str, int]) -> None:
        status = {
            "currentNumberScheduled": counts["scheduled"],
            "numberMisscheduled": counts["misscheduled"],
            "desiredNumberScheduled": counts["desired"],
            "numberReady": counts["ready"],
            "updatedNumberScheduled": counts["scheduled"],
            "numberAvailable": counts["ready"],
            "observedGeneration": (ds.get("metadata") or {}).get("generation") or 1,
        }
        unavailable = counts["desired"] - counts["ready"]
        if unavailable > 0:
            status["numberUnavailable"] = unavailable
        current = ds.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()) and ("numberUnavailable" in current) == (
            unavailable > 0
        ):
            return
        updated = writable(ds)
        updated["status"] = {**{k: v for k, v in current.items() if k != "numberUnavailable"}, **status}
        try_update(store, "daemonsets.apps", updated)
