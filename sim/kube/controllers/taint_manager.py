"""Taint-based eviction: the NoExecute half of "Taints and Tolerations".

https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions:
pods that do not tolerate a node's NoExecute taint are evicted at once; pods that tolerate it without
``tolerationSeconds`` stay; pods that tolerate it with ``tolerationSeconds`` stay that long after the
taint was added (the taint's ``timeAdded``, else when this controller first saw it). These evictions are
plain deletions, not the Eviction API: no PodDisruptionBudget is consulted, and the pod gets the
``DisruptionTarget`` condition with reason ``DeletionByTaintManager`` ("Pod disruption conditions").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    format_time,
    graceful_delete,
    is_terminal,
    is_terminating,
    name_of,
    set_condition,
    termination_grace,
    tolerates,
    try_update,
    writable,
)
from sim.kube.controllers.kubelet import parse_time
from sim.kube.protocols import KubeObject, ObjectStore

_TaintId = tuple[str, str, str, str]


def _taint_id(node: Mapping[str, Any], taint: Mapping[str, Any]) -> _TaintId:
    return (name_of(node), str(taint.get("key")), str(taint.get("value") or ""), str(taint.get("effect")))


class TaintManager:
    """Deletes pods from nodes whose NoExecute taints they do not tolerate (or tolerate only for a while)."""

    name = "taint-manager"

    def __init__(self) -> None:
        self._first_seen: dict[_TaintId, datetime] = {}

    def reconcile(self, store: ObjectStore) -> None:
        """Delete every pod whose NoExecute toleration has run out."""
        cache = cache_for(store)
        now = store.clock.now()
        tainted: dict[str, list[tuple[Mapping[str, Any], datetime]]] = {}
        seen: set[_TaintId] = set()
        for node in cache.list("nodes"):
            for taint in (node.get("spec") or {}).get("taints") or []:
                if taint.get("effect") == "NoExecute":
                    ident = _taint_id(node, taint)
                    seen.add(ident)
                    added = self._first_seen.setdefault(ident, now)
                    if taint.get("timeAdded"):
                        added = parse_time(str(taint["timeAdded"]))
                    tainted.setdefault(name_of(node), []).append((taint, added))
        # Forget removed taints, so a taint added again starts its toleration period afresh.
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in seen}
        if not tainted:
            return
        for pod in cache.list("pods"):
            taints = tainted.get(str((pod.get("spec") or {}).get("nodeName") or ""))
            if taints and not is_terminating(pod) and not is_terminal(pod):
                due = _eviction_due(pod, taints)
                if due is not None and now >= due:
                    self._delete(store, pod)

    @staticmethod
    def _delete(store: ObjectStore, pod: KubeObject) -> None:
        marked = writable(pod)
        set_condition(
            marked.setdefault("status", {}),
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastProbeTime": None,
            },
            format_time(store),
        )
        if try_update(store, "pods", marked) is not None:
            graceful_delete(store, "pods", pod, termination_grace(pod))


def _eviction_due(
    pod: Mapping[str, Any], taints: list[tuple[Mapping[str, Any], datetime]]
) -> datetime | None:
    """When the pod must go, or None when it may stay.

    As the taint manager's getMinTolerationTime: any untolerated NoExecute taint evicts at once; otherwise
    the shortest ``tolerationSeconds`` among the tolerations used counts (tolerations without it only
    matter when none has it: then the pod stays), from when the taints were first seen.
    """
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    used: list[Mapping[str, Any]] = []
    for taint, added in taints:
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return added
        used.extend(matching)
    limits = [int(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    if not limits:
        return None
    start = min(added for _, added in taints)
    return start + timedelta(seconds=max(0, min(limits)))
