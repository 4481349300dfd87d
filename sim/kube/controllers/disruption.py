"""The disruption controller: keeps ``PodDisruptionBudget.status`` current.

"Specifying a Disruption Budget" → "Check the status of the PDB": ``currentHealthy``, ``desiredHealthy``,
``expectedPods``, ``disruptionsAllowed``, ``observedGeneration`` and the ``DisruptionAllowed`` condition
(reason ``SufficientPods`` / ``InsufficientPods``; or ``SyncFailed``, with only ``disruptionsAllowed: 0``
written, when a percentage or ``maxUnavailable`` covers pods whose owner has no scale subresource, such as
a Job, as the real controller's failSafe does). The arithmetic is :mod:`sim.kube.disruption`; replica
counts of ReplicaSets, StatefulSets and ReplicationControllers come from their ``spec.replicas``.
"""

from __future__ import annotations

import copy

from sim.kube.controllers.cache import ChangeGate, ClusterCache, cache_for
from sim.kube.controllers.common import format_time, set_condition, try_update, uid_of, writable
from sim.kube.disruption import budget_status
from sim.kube.protocols import ObjectStore

_SCALABLE = ("replicasets.apps", "statefulsets.apps", "replicationcontrollers")


def _replicas(cache: ClusterCache) -> dict[str, int]:
    replicas: dict[str, int] = {}
    for resource in _SCALABLE:
        for obj in cache.list(resource):
            value = (obj.get("spec") or {}).get("replicas")
            replicas[uid_of(obj)] = 1 if value is None else int(value)
    return replicas


class DisruptionController:
    """Writes every budget's status from the pods it selects."""

    name = "disruption"

    def __init__(self) -> None:
        # Neither spec nor status depends on time: a pass after no change would repeat the last one.
        self._gate = ChangeGate()

    def reconcile(self, store: ObjectStore) -> None:
        """Recompute the status of every PodDisruptionBudget; write only what changed."""
        cache = cache_for(store)
        if self._gate.unchanged(cache):
            return
        generation = cache.generation
        budgets = cache.list("poddisruptionbudgets.policy")
        self._gate.mark(cache, generation)
        if not budgets:
            return
        pods = cache.list("pods")
        replicas = _replicas(cache)
        for pdb in budgets:
            figures = budget_status(pdb, pods, controller_replicas=replicas)
            status = copy.deepcopy(pdb.get("status") or {})
            if figures.sync_error is not None:
                # failSafe: only disruptionsAllowed 0 and the condition; observedGeneration is not advanced.
                status["disruptionsAllowed"] = 0
                failed = {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "reason": "SyncFailed",
                    "message": figures.sync_error,
                    "observedGeneration": status.get("observedGeneration", 0),
                }
                set_condition(status, failed, format_time(store))
                status.setdefault("disruptedPods", {})
                if status != (pdb.get("status") or {}):
                    updated = writable(pdb)
                    updated["status"] = status
                    try_update(store, "poddisruptionbudgets.policy", updated)
                continue
            status.update(
                currentHealthy=figures.current_healthy,
                desiredHealthy=figures.desired_healthy,
                expectedPods=figures.expected_pods,
                disruptionsAllowed=figures.disruptions_allowed,
                observedGeneration=(pdb.get("metadata") or {}).get("generation") or 1,
            )
            allowed = figures.disruptions_allowed > 0
            set_condition(
                status,
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed else "False",
                    "reason": "SufficientPods" if allowed else "InsufficientPods",
                    "message": "",
                    "observedGeneration": status["observedGeneration"],
                },
                format_time(store),
            )
            status.setdefault("disruptedPods", {})
            if status != (pdb.get("status") or {}):
                updated = writable(pdb)
                updated["status"] = status
                try_update(store, "poddisruptionbudgets.policy", updated)
