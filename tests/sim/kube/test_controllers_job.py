"""The simulated Job controller follows "Jobs" and "Pod failure policy" in the Kubernetes docs.

https://kubernetes.io/docs/concepts/workloads/controllers/job/
https://kubernetes.io/docs/tasks/job/pod-failure-policy/
"""

from __future__ import annotations

from typing import Any

from core.clock import ManualClock
from sim.kube.controllers import JobController, Kubelet, Scheduler
from sim.kube.controllers.job import format_indexes, parse_indexes
from sim.kube.disruption import disruption_target_condition
from sim.kube.fleet import build_fleet
from sim.kube.store import MemoryStore

CONTROLLERS = (Scheduler(), Kubelet(), JobController())


def _setup(nodes: int = 2) -> tuple[MemoryStore, ManualClock]:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    store.create("namespaces", {"metadata": {"name": "ml"}})
    build_fleet(store, nodes)
    return store, clock


def _settle(store: MemoryStore, rounds: int = 6) -> None:
    for _ in range(rounds):
        for controller in CONTROLLERS:
            controller.reconcile(store)


def _job(name: str = "train", annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
            **spec,
        },
    }


def _status(store: MemoryStore, name: str = "train") -> dict[str, Any]:
    job = store.get("jobs.batch", "ml", name)
    assert job is not None
    return job.get("status") or {}


def _conditions(store: MemoryStore, name: str = "train") -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in _status(store, name).get("conditions", [])}


def _pods(store: MemoryStore) -> list[dict[str, Any]]:
    return store.list("pods", "ml")


def _evict(store: MemoryStore, pod: dict[str, Any]) -> None:
    """What the eviction subresource does: DisruptionTarget, then a graceful delete."""
    pod["status"]["conditions"].append(
        disruption_target_condition("EvictionByEvictionAPI", "Eviction API: evicting", "2026-01-01T00:00:00Z")
    )
    store.update("pods", pod)
    store.mark_deleting("pods", "ml", pod["metadata"]["name"], 30)


def test_creates_parallelism_pods_with_labels_owner_and_tracking_finalizer() -> None:
    store, _ = _setup()
    store.create("jobs.batch", _job(parallelism=2, completions=4))
    _settle(store)
    pods = _pods(store)
    assert len(pods) == 2
    job_uid = store.get("jobs.batch", "ml", "train")["metadata"]["uid"]
    for pod in pods:
        assert pod["metadata"]["name"].startswith("train-")
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job_uid
        assert pod["metadata"]["ownerReferences"][0]["controller"] is True
        assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        assert pod["status"]["phase"] == "Running"
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-node-0", "gpu-node-1"}
    assert _status(store)["active"] == 2
    assert _status(store)["ready"] == 2


def test_job_completes_after_completions_succeed() -> None:
    store, clock = _setup()
    store.create(
        "jobs.batch", _job(annotations={"sim.gpuhealth.io/run-seconds": "10"}, parallelism=2, completions=3)
    )
    _settle(store)
    clock.advance(10)
    _settle(store)
    assert _status(store)["succeeded"] == 2
    clock.advance(10)
    _settle(store)
    status = _status(store)
    assert status["succeeded"] == 3
    assert _conditions(store)["Complete"] == ("True", "CompletionsReached")
    assert "completionTime" in status
    assert all(not p["metadata"].get("finalizers") for p in _pods(store))


def test_indexed_job_names_and_annotates_pods_by_index() -> None:
    store, clock = _setup()
    store.create(
        "jobs.batch",
        _job(
            annotations={"sim.gpuhealth.io/run-seconds": "5"},
            completionMode="Indexed",
            completions=2,
            parallelism=2,
        ),
    )
    _settle(store)
    pods = sorted(_pods(store), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods] == [
        "0",
        "1",
    ]
    assert pods[0]["metadata"]["name"].startswith("train-0-")
    assert pods[1]["spec"]["hostname"] == "train-1"
    clock.advance(5)
    _settle(store)
    assert _status(store)["completedIndexes"] == "0-1"
    assert _conditions(store)["Complete"][0] == "True"


def test_failures_beyond_backoff_limit_fail_the_job() -> None:
    store, clock = _setup()
    store.create("jobs.batch", _job(annotations={"sim.gpuhealth.io/fail-after": "1"}, backoffLimit=1))
    for _ in range(4):
        _settle(store)
        clock.advance(1)
    _settle(store)
    assert _status(store)["failed"] == 2
    assert _conditions(store)["Failed"] == ("True", "BackoffLimitExceeded")


def test_evicted_pod_is_counted_failed_and_replaced_on_another_node() -> None:
    """Default podReplacementPolicy TerminatingOrFailed: a terminating pod is failed and replaced at once."""
    store, _ = _setup()
    store.create("jobs.batch", _job())
    _settle(store)
    (first,) = _pods(store)
    node = store.get("nodes", None, first["spec"]["nodeName"])
    assert node is not None
    node["spec"]["taints"] = [{"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}]
    store.update("nodes", node)
    _evict(store, first)
    _settle(store)
    replacement = [p for p in _pods(store) if p["metadata"]["uid"] != first["metadata"]["uid"]]
    assert len(replacement) == 1
    assert replacement[0]["spec"]["nodeName"] != first["spec"]["nodeName"]
    assert _status(store)["failed"] == 1


def test_pod_failure_policy_ignore_on_disruption_target_does_not_count() -> None:
    """Pod failure policy: Ignore on DisruptionTarget; replacement waits until the pod is Failed."""
    store, clock = _setup()
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    store.create("jobs.batch", _job(podFailurePolicy=policy, backoffLimit=0))
    _settle(store)
    (first,) = _pods(store)
    _evict(store, first)
    _settle(store)
    assert len(_pods(store)) == 1, "no replacement while the evicted pod is still terminating"
    clock.advance(30)
    _settle(store)
    running = [p for p in _pods(store) if p["status"].get("phase") == "Running"]
    assert len(running) == 1
    assert running[0]["metadata"]["uid"] != first["metadata"]["uid"]
    assert _status(store).get("failed", 0) == 0
    assert "Failed" not in _conditions(store)


def test_pod_failure_policy_fail_job_on_exit_code() -> None:
    store, clock = _setup()
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}
        ]
    }
    store.create(
        "jobs.batch",
        _job(
            annotations={"sim.gpuhealth.io/fail-after": "1", "sim.gpuhealth.io/exit-code": "42"},
            podFailurePolicy=policy,
        ),
    )
    _settle(store)
    clock.advance(1)
    _settle(store)
    status, reason = _conditions(store)["Failed"]
    assert (status, reason) == ("True", "PodFailurePolicy")
    message = next(c["message"] for c in _status(store)["conditions"] if c["type"] == "Failed")
    assert "exit code 42" in message


def test_pod_replacement_policy_failed_waits_for_terminal_phase() -> None:
    store, clock = _setup()
    store.create("jobs.batch", _job(podReplacementPolicy="Failed"))
    _settle(store)
    (first,) = _pods(store)
    store.mark_deleting("pods", "ml", first["metadata"]["name"], 30)
    _settle(store)
    assert len(_pods(store)) == 1
    assert _status(store)["terminating"] == 1
    clock.advance(30)
    _settle(store)
    assert [p["metadata"]["uid"] != first["metadata"]["uid"] for p in _pods(store)] == [True]


def test_suspend_deletes_active_pods_without_counting_and_resume_recreates() -> None:
    store, clock = _setup()
    store.create("jobs.batch", _job())
    _settle(store)
    job = store.get("jobs.batch", "ml", "train")
    assert job is not None
    job["spec"]["suspend"] = True
    store.update("jobs.batch", job)
    _settle(store)
    assert _conditions(store)["Suspended"] == ("True", "JobSuspended")
    clock.advance(30)
    _settle(store)
    assert _pods(store) == []
    assert _status(store).get("failed", 0) == 0
    job = store.get("jobs.batch", "ml", "train")
    assert job is not None
    job["spec"]["suspend"] = False
    store.update("jobs.batch", job)
    _settle(store)
    assert _conditions(store)["Suspended"] == ("False", "JobResumed")
    assert len(_pods(store)) == 1


def test_completed_indexes_format_round_trips() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert format_indexes(set()) == ""
