"""The simulated kubelet follows "Pod Lifecycle": start, simulated work, graceful termination."""

from __future__ import annotations

from typing import Any

from core.clock import ManualClock
from sim.kube.controllers import Kubelet
from sim.kube.fleet import gpu_node
from sim.kube.store import MemoryStore


def _setup(**node: Any) -> tuple[MemoryStore, ManualClock]:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    store.create("namespaces", {"metadata": {"name": "ml"}})
    store.create("nodes", gpu_node("n1", **node))
    return store, clock


def _bound_pod(
    store: MemoryStore, name: str = "p", annotations: dict[str, str] | None = None, **spec: Any
) -> None:
    store.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "img:1"}], **spec},
        },
    )


def _pod(store: MemoryStore, name: str = "p") -> dict[str, Any]:
    pod = store.get("pods", "ml", name)
    assert pod is not None
    return pod


def _conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}


def test_bound_pod_on_ready_node_runs_with_ready_conditions_and_ips() -> None:
    store, _ = _setup()
    _bound_pod(store)
    Kubelet().reconcile(store)
    pod = _pod(store)
    assert pod["status"]["phase"] == "Running"
    conditions = _conditions(pod)
    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert conditions[kind] == "True"
    assert pod["status"]["startTime"] == "2026-01-01T00:00:00Z"
    assert pod["status"]["hostIP"] == store.get("nodes", None, "n1")["status"]["addresses"][0]["address"]
    assert pod["status"]["podIP"].startswith("10.")
    assert pod["status"]["containerStatuses"][0]["state"]["running"]


def test_pods_on_not_ready_node_are_not_started() -> None:
    store, _ = _setup(ready=False)
    _bound_pod(store)
    Kubelet().reconcile(store)
    assert _pod(store)["status"].get("phase", "Pending") == "Pending"


def test_running_pod_turns_not_ready_when_its_node_goes_not_ready() -> None:
    """Node lifecycle controller: pods of a NotReady node get Ready=False."""
    store, _ = _setup()
    _bound_pod(store)
    kubelet = Kubelet()
    kubelet.reconcile(store)
    node = store.get("nodes", None, "n1")
    assert node is not None
    next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] = "Unknown"
    store.update("nodes", node)
    kubelet.reconcile(store)
    assert _conditions(_pod(store))["Ready"] == "False"


def test_run_seconds_annotation_succeeds_after_that_many_seconds() -> None:
    store, clock = _setup()
    _bound_pod(store, annotations={"sim.gpuhealth.io/run-seconds": "30"}, restartPolicy="Never")
    kubelet = Kubelet()
    kubelet.reconcile(store)
    clock.advance(29)
    kubelet.reconcile(store)
    assert _pod(store)["status"]["phase"] == "Running"
    clock.advance(1)
    kubelet.reconcile(store)
    pod = _pod(store)
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert _conditions(pod)["Ready"] == "False"


def test_fail_after_fails_with_exit_code_or_restarts_under_on_failure() -> None:
    store, clock = _setup()
    failing = {"sim.gpuhealth.io/fail-after": "10", "sim.gpuhealth.io/exit-code": "42"}
    _bound_pod(store, "never", failing, restartPolicy="Never")
    _bound_pod(store, "onfailure", failing, restartPolicy="OnFailure")
    kubelet = Kubelet()
    kubelet.reconcile(store)
    clock.advance(10)
    kubelet.reconcile(store)
    never = _pod(store, "never")
    assert never["status"]["phase"] == "Failed"
    assert never["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 42
    restarted = _pod(store, "onfailure")
    assert restarted["status"]["phase"] == "Running"
    assert restarted["status"]["containerStatuses"][0]["restartCount"] == 1
    assert restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 42


def test_graceful_deletion_waits_for_the_grace_period_then_goes_terminal_and_removes() -> None:
    """Pod Lifecycle, termination: removal after deletionGracePeriodSeconds; the kubelet first moves the
    pod to a terminal phase, and finalizers keep it until they are removed."""
    store, clock = _setup()
    _bound_pod(store, "plain")
    _bound_pod(store, "held")
    held = _pod(store, "held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    store.update("pods", held)
    kubelet = Kubelet()
    kubelet.reconcile(store)
    store.mark_deleting("pods", "ml", "plain", 30)
    store.mark_deleting("pods", "ml", "held", 30)
    clock.advance(29)
    kubelet.reconcile(store)
    assert _pod(store, "plain")["status"]["phase"] == "Running"
    clock.advance(1)
    kubelet.reconcile(store)
    assert store.get("pods", "ml", "plain") is None
    assert _pod(store, "held")["status"]["phase"] == "Failed"


def test_terminating_pod_on_dead_node_stays_until_out_of_service_taint() -> None:
    """Non-graceful node shutdown: pods stay Terminating until node.kubernetes.io/out-of-service."""
    store, clock = _setup()
    _bound_pod(store)
    kubelet = Kubelet()
    kubelet.reconcile(store)
    node = store.get("nodes", None, "n1")
    assert node is not None
    next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] = "Unknown"
    store.update("nodes", node)
    store.mark_deleting("pods", "ml", "p", 30)
    clock.advance(600)
    kubelet.reconcile(store)
    assert store.get("pods", "ml", "p") is not None
    node = store.get("nodes", None, "n1")
    assert node is not None
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    ]
    store.update("nodes", node)
    kubelet.reconcile(store)
    assert store.get("pods", "ml", "p") is None
