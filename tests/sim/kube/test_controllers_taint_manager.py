"""Taint-based evictions ("Taints and Tolerations" → NoExecute): deletes, not evictions, no PDB check."""

from __future__ import annotations

from typing import Any

from core.clock import ManualClock
from sim.kube.controllers import TaintManager
from sim.kube.fleet import gpu_node
from sim.kube.store import MemoryStore

NO_EXECUTE = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoExecute"}


def _setup() -> tuple[MemoryStore, ManualClock]:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    store.create("namespaces", {"metadata": {"name": "ml"}})
    store.create("nodes", gpu_node("n1"))
    return store, clock


def _pod(store: MemoryStore, name: str, tolerations: list[dict[str, Any]] | None = None) -> None:
    store.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "i"}],
                "tolerations": tolerations or [],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )


def _taint(store: MemoryStore) -> None:
    node = store.get("nodes", None, "n1")
    assert node is not None
    node["spec"]["taints"] = [NO_EXECUTE]
    store.update("nodes", node)


def _deleting(store: MemoryStore, name: str) -> bool:
    pod = store.get("pods", "ml", name)
    return pod is None or "deletionTimestamp" in pod["metadata"]


def test_untolerated_no_execute_deletes_at_once_with_disruption_target_and_ignores_pdb() -> None:
    store, _ = _setup()
    _pod(store, "victim")
    store.create(
        "poddisruptionbudgets.policy",
        {"metadata": {"name": "all", "namespace": "ml"}, "spec": {"minAvailable": 1, "selector": {}}},
    )
    _taint(store)
    TaintManager().reconcile(store)
    pod = store.get("pods", "ml", "victim")
    assert pod is not None
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    target = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "DeletionByTaintManager")


def test_toleration_seconds_delays_deletion_on_the_clock() -> None:
    store, clock = _setup()
    _pod(
        store,
        "patient",
        [
            {
                "key": "gpuhealth.io/unhealthy",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            }
        ],
    )
    _pod(store, "forever", [{"key": "gpuhealth.io/unhealthy", "operator": "Exists", "effect": "NoExecute"}])
    manager = TaintManager()
    _taint(store)
    manager.reconcile(store)
    clock.advance(59)
    manager.reconcile(store)
    assert not _deleting(store, "patient")
    clock.advance(1)
    manager.reconcile(store)
    assert _deleting(store, "patient")
    clock.advance(3600)
    manager.reconcile(store)
    assert not _deleting(store, "forever")


def test_no_schedule_taint_evicts_nothing() -> None:
    store, _ = _setup()
    _pod(store, "stays")
    node = store.get("nodes", None, "n1")
    assert node is not None
    node["spec"]["taints"] = [{**NO_EXECUTE, "effect": "NoSchedule"}]
    store.update("nodes", node)
    TaintManager().reconcile(store)
    assert not _deleting(store, "stays")
