"""The default scheduler, reduced to the filters GPU workloads meet.

Follows "Assigning Pods to Nodes" (nodeSelector, required node affinity incl. ``matchFields``), "Taints and
Tolerations" (NoSchedule and NoExecute must be tolerated), "Taint Nodes by Condition" (NotReady,
unreachable and cordoned nodes carry NoSchedule taints), and extended resources ("Resource Management
for Pods and Containers": a node fits while allocatable minus the requests of its non-terminated pods
covers the pod's request). Scoring is deterministic: least allocated GPUs, then fewest pods, then name.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.kube.controllers.cache import ChangeGate, cache_for
from sim.kube.controllers.common import (
    DEFAULT_SCHEDULER,
    GPU_RESOURCE,
    allocatable,
    condition,
    format_time,
    is_terminal,
    is_terminating,
    name_of,
    node_matches_pod,
    node_taints,
    pod_request,
    set_condition,
    try_update,
    untolerated,
    writable,
)
from sim.kube.protocols import KubeObject, ObjectStore

_DEFAULT_MAX_PODS = 110


@dataclass
class _NodeLoad:
    node: KubeObject
    taints: list[Mapping[str, Any]]
    gpus_used: int = 0
    pods: int = 0

    @property
    def gpus_free(self) -> int:
        return allocatable(self.node, GPU_RESOURCE) - self.gpus_used


@dataclass
class _Rejections:
    """Why nodes were filtered out, counted the way the scheduler's FailedScheduling message reports."""

    reasons: Counter[str] = field(default_factory=Counter)

    def message(self, total: int) -> str:
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))
        return f"0/{total} nodes are available: {parts}." if parts else f"0/{total} nodes are available."


def _wants_default_scheduler(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
        and not spec.get("schedulingGates")
        and not is_terminating(pod)
        and not is_terminal(pod)
    )


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    spec = pod.get("spec") or {}
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    return (-int(spec.get("priority") or 0), created, name_of(pod))


@dataclass
class _Candidates:
    """Nodes passing the static filters for one kind of pod, as a heap ordered by score.

    Within one pass a node's usage only grows, so a node too full for this kind of pod stays too full
    and can be dropped for good; scores only rise, so a stale heap entry is simply re-pushed.
    """

    heap: list[tuple[tuple[float, int, str], str]]
    rejections: _Rejections
    total: int


def _signature(spec: Mapping[str, Any], wanted: int) -> str:
    static = {key: spec.get(key) for key in ("tolerations", "nodeSelector", "affinity")}
    return json.dumps([static, wanted], sort_keys=True, default=str)


def _score(load: _NodeLoad) -> tuple[float, int, str]:
    return (_gpu_share(load), load.pods, name_of(load.node))


class Scheduler:
    """Binds Pending pods of the default scheduler to a feasible node, or marks them Unschedulable."""

    name = "scheduler"

    def __init__(self) -> None:
        self._gate = ChangeGate()

    def reconcile(self, store: ObjectStore) -> None:
        """Bind every schedulable pending pod, highest priority and oldest first."""
        cache = cache_for(store)
        if self._gate.unchanged(cache):
            return  # nothing changed since the last pass: the same pods would fail the same way
        generation = cache.generation  # read first: changes made during this pass get another pass
        pending = sorted((p for p in cache.list("pods") if _wants_default_scheduler(p)), key=_queue_order)
        if pending:
            loads = self._loads(cache.list("nodes"), cache.list("pods"))
            candidates: dict[str, _Candidates] = {}
            for pod in pending:
                self._schedule(store, pod, loads, candidates)
        self._gate.mark(cache, generation)

    @staticmethod
    def _loads(nodes: list[KubeObject], pods: list[KubeObject]) -> dict[str, _NodeLoad]:
        loads = {name_of(node): _NodeLoad(node, node_taints(node)) for node in nodes}
        for pod in pods:
            load = loads.get((pod.get("spec") or {}).get("nodeName") or "")
            if load is not None and not is_terminal(pod):
                load.gpus_used += pod_request(pod.get("spec") or {})
                load.pods += 1
        return loads

    def _schedule(
        self,
        store: ObjectStore,
        pod: KubeObject,
        loads: dict[str, _NodeLoad],
        candidates: dict[str, _Candidates],
    ) -> None:
        spec = pod.get("spec") or {}
        wanted = pod_request(spec)
        signature = _signature(spec, wanted)
        found = candidates.get(signature)
        if found is None:
            found = candidates[signature] = self._candidates(spec, loads)
        while found.heap:
            key, node_name = found.heap[0]
            load = loads[node_name]
            if key != _score(load):
                heapq.heapreplace(found.heap, (_score(load), node_name))
                continue
            reason = self._dynamic_misfit(wanted, load)
            if reason is not None:
                heapq.heappop(found.heap)
                found.rejections.reasons[reason] += 1
                continue
            if self._bind(store, pod, node_name):
                load.gpus_used += wanted
                load.pods += 1
                heapq.heapreplace(found.heap, (_score(load), node_name))
            return
        self._mark_unschedulable(store, pod, found.rejections.message(found.total))

    def _candidates(self, spec: Mapping[str, Any], loads: dict[str, _NodeLoad]) -> _Candidates:
        rejections = _Rejections()
        heap = [
            (_score(load), name) for name, load in loads.items() if self._static_fit(spec, load, rejections)
        ]
        heapq.heapify(heap)
        return _Candidates(heap, rejections, len(loads))

    @staticmethod
    def _static_fit(spec: Mapping[str, Any], load: _NodeLoad, rejections: _Rejections) -> bool:
        tolerations = list(spec.get("tolerations") or [])
        blocking = untolerated(load.taints, tolerations, ("NoSchedule", "NoExecute"))
        if blocking:
            taint = blocking[0]
            rejections.reasons[
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            ] += 1
            return False
        if not node_matches_pod(spec, load.node):
            rejections.reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            return False
        return True

    @staticmethod
    def _dynamic_misfit(wanted: int, load: _NodeLoad) -> str | None:
        if load.pods >= allocatable(load.node, "pods", _DEFAULT_MAX_PODS):
            return "Too many pods"
        if wanted > load.gpus_free:
            return f"Insufficient {GPU_RESOURCE}"
        return None

    @staticmethod
    def _bind(store: ObjectStore, pod: KubeObject, node_name: str) -> bool:
        bound = writable(pod)
        bound.setdefault("spec", {})["nodeName"] = node_name
        status = bound.setdefault("status", {})
        status.setdefault("phase", "Pending")
        set_condition(
            status, {"type": "PodScheduled", "status": "True", "lastProbeTime": None}, format_time(store)
        )
        for stale in ("reason", "message"):
            _drop_condition_field(status, "PodScheduled", stale)
        return try_update(store, "pods", bound) is not None

    @staticmethod
    def _mark_unschedulable(store: ObjectStore, pod: KubeObject, message: str) -> None:
        current = condition(pod, "PodScheduled")
        if current and current.get("reason") == "Unschedulable" and current.get("message") == message:
            return
        updated = writable(pod)
        status = updated.setdefault("status", {})
        status.setdefault("phase", "Pending")
        set_condition(
            status,
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
            },
            format_time(store),
        )
        try_update(store, "pods", updated)


def _gpu_share(load: _NodeLoad) -> float:
    capacity = allocatable(load.node, GPU_RESOURCE)
    return load.gpus_used / capacity if capacity else 0.0


def _drop_condition_field(status: dict[str, Any], kind: str, key: str) -> None:
    for entry in status.get("conditions") or []:
        if entry.get("type") == kind:
            entry.pop(key, None)
