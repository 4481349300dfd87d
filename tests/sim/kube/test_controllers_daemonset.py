"""The simulated DaemonSet controller follows "DaemonSet" in the Kubernetes docs
(https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/)."""

from __future__ import annotations

from typing import Any

from core.clock import ManualClock
from sim.kube.controllers import DaemonSetController, Kubelet, Scheduler
from sim.kube.fleet import gpu_node
from sim.kube.store import MemoryStore

CONTROLLERS = (DaemonSetController(), Scheduler(), Kubelet())


def _setup(*nodes: dict[str, Any]) -> MemoryStore:
    store = MemoryStore(clock=ManualClock())
    store.create("namespaces", {"metadata": {"name": "gpuhealth"}})
    for node in nodes:
        store.create("nodes", node)
    return store


def _settle(store: MemoryStore) -> None:
    for _ in range(4):
        for controller in CONTROLLERS:
            controller.reconcile(store)


def _daemonset(**pod_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "gpuhealth"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "gpuhealth:1"}], **pod_spec},
            },
        },
    }


def _placement(store: MemoryStore) -> list[str]:
    return sorted(p["spec"].get("nodeName", "") for p in store.list("pods", "gpuhealth"))


def test_one_pod_per_eligible_node_with_controller_owner_reference() -> None:
    store = _setup(
        gpu_node("n1"), gpu_node("n2"), gpu_node("cpu", labels={"nvidia.com/gpu.present": "false"})
    )
    store.create("daemonsets.apps", _daemonset(nodeSelector={"nvidia.com/gpu.present": "true"}))
    _settle(store)
    assert _placement(store) == ["n1", "n2"]
    for pod in store.list("pods", "gpuhealth"):
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["controller"]) == ("DaemonSet", True)
        assert pod["status"]["phase"] == "Running"
    status = store.get("daemonsets.apps", "gpuhealth", "agent")["status"]
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberReady"]) == (
        2,
        2,
        2,
    )


def test_daemon_pods_tolerate_unschedulable_and_node_condition_taints() -> None:
    """'Taints and tolerations' for DaemonSets: unschedulable NoSchedule is tolerated (cordoned nodes keep
    their daemons); a foreign NoSchedule taint is not."""
    foreign = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    store = _setup(gpu_node("cordoned", unschedulable=True), gpu_node("foreign", taints=[foreign]))
    store.create("daemonsets.apps", _daemonset())
    _settle(store)
    assert _placement(store) == ["cordoned"]
    pod = store.list("pods", "gpuhealth")[0]
    keys = {t["key"] for t in pod["spec"]["tolerations"]}
    assert {"node.kubernetes.io/unschedulable", "node.kubernetes.io/not-ready"} <= keys
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["cordoned"]


def test_pod_is_removed_when_node_stops_matching_and_added_for_new_nodes() -> None:
    store = _setup(gpu_node("n1"))
    store.create("daemonsets.apps", _daemonset(nodeSelector={"nvidia.com/gpu.present": "true"}))
    _settle(store)
    node = store.get("nodes", None, "n1")
    assert node is not None
    node["metadata"]["labels"]["nvidia.com/gpu.present"] = "false"
    store.update("nodes", node)
    store.create("nodes", gpu_node("n2"))
    _settle(store)
    live = [p for p in store.list("pods", "gpuhealth") if "deletionTimestamp" not in p["metadata"]]
    assert [p["spec"]["nodeName"] for p in live] == ["n2"]
