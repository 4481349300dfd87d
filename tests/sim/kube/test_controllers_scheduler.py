"""The simulated default scheduler places pods as "Assigning Pods to Nodes", "Taints and Tolerations" and
"Resource Management for Pods and Containers" (extended resources) describe."""

from __future__ import annotations

from typing import Any

from core.clock import ManualClock
from sim.kube.controllers import Scheduler
from sim.kube.fleet import gpu_node
from sim.kube.store import MemoryStore


def _store(*nodes: dict[str, Any]) -> MemoryStore:
    store = MemoryStore(clock=ManualClock())
    store.create("namespaces", {"metadata": {"name": "ml"}})
    for node in nodes:
        store.create("nodes", node)
    return store


def _pod(name: str, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "trainer:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"containers": [container], **spec}}


def _schedule(store: MemoryStore, *pods: dict[str, Any]) -> dict[str, str | None]:
    for pod in pods:
        store.create("pods", pod)
    Scheduler().reconcile(store)
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in store.list("pods", "ml")}


def test_binds_pending_pod_and_sets_pod_scheduled_true() -> None:
    store = _store(gpu_node("n1"))
    assert _schedule(store, _pod("a", gpus=8)) == {"a": "n1"}
    pod = store.get("pods", "ml", "a")
    assert pod is not None
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled[0]["status"] == "True"


def test_gpu_capacity_is_allocatable_minus_requests_of_non_terminated_pods() -> None:
    """Extended resources: a node fits while allocatable covers the sum of bound pods' requests."""
    store = _store(gpu_node("n1", gpus=8))
    placed = _schedule(store, _pod("a", gpus=6), _pod("b", gpus=4))
    assert placed == {"a": "n1", "b": None}
    pod = store.get("pods", "ml", "b")
    assert pod is not None
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "1 Insufficient nvidia.com/gpu" in condition["message"]
    assert condition["message"].startswith("0/1 nodes are available")


def test_finished_pods_free_their_gpus() -> None:
    store = _store(gpu_node("n1", gpus=8))
    done = _pod("done", gpus=8, nodeName="n1")
    store.create("pods", {**done, "status": {"phase": "Succeeded"}})
    assert _schedule(store, _pod("next", gpus=8))["next"] == "n1"


def test_cordoned_and_not_ready_nodes_are_skipped() -> None:
    """Taint nodes by condition: unschedulable and NotReady nodes carry NoSchedule taints."""
    store = _store(
        gpu_node("a-cordoned", unschedulable=True), gpu_node("b-down", ready=False), gpu_node("c-ok")
    )
    assert _schedule(store, _pod("p", gpus=1))["p"] == "c-ok"


def test_untolerated_noschedule_taint_blocks_and_toleration_allows() -> None:
    """Toleration matching: Equal needs key and value; Exists with empty key matches every taint."""
    taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}
    store = _store(gpu_node("n1", taints=[taint]))
    wrong_value = [
        {"key": "gpuhealth.io/unhealthy", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
    ]
    tolerate_all = [{"operator": "Exists"}]
    placed = _schedule(
        store, _pod("plain"), _pod("wrong", tolerations=wrong_value), _pod("all", tolerations=tolerate_all)
    )
    assert placed == {"plain": None, "wrong": None, "all": "n1"}


def test_prefer_no_schedule_taint_does_not_block() -> None:
    store = _store(gpu_node("n1", taints=[{"key": "k", "effect": "PreferNoSchedule"}]))
    assert _schedule(store, _pod("p"))["p"] == "n1"


def test_node_selector_and_required_affinity_operators() -> None:
    """nodeSelector labels must all match; affinity terms are ORed, expressions ANDed (In, NotIn, Exists,
    DoesNotExist, Gt, Lt) and matchFields selects metadata.name."""
    store = _store(gpu_node("h100", gpus=8), gpu_node("h200", product="NVIDIA-H200", gpus=8))
    by_selector = _pod("sel", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H200"})

    def affinity(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        term: dict[str, Any] = {"matchExpressions": list(expressions)}
        if fields:
            term["matchFields"] = fields
        return {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }

    big_memory = _pod(
        "gt", affinity=affinity({"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["100000"]})
    )
    not_h200 = _pod(
        "notin",
        affinity=affinity({"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-H200"]}),
    )
    missing = _pod("dne", affinity=affinity({"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}))
    by_name = _pod(
        "field", affinity=affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["h100"]}])
    )
    placed = _schedule(store, by_selector, big_memory, not_h200, missing, by_name)
    assert placed == {"sel": "h200", "gt": "h200", "notin": "h100", "dne": None, "field": "h100"}


def test_choice_is_least_allocated_then_name() -> None:
    """Deterministic spreading: the node with the smallest GPU share wins, ties go to the first name."""
    store = _store(gpu_node("n1"), gpu_node("n2"))
    placed = _schedule(store, _pod("a", gpus=4), _pod("b", gpus=4), _pod("c", gpus=4))
    assert placed == {"a": "n1", "b": "n2", "c": "n1"}


def test_other_schedulers_and_gated_pods_are_left_alone() -> None:
    store = _store(gpu_node("n1"))
    placed = _schedule(
        store, _pod("custom", schedulerName="volcano"), _pod("gated", schedulingGates=[{"name": "kueue"}])
    )
    assert placed == {"custom": None, "gated": None}
