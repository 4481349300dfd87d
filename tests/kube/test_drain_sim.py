"""The drain against the emulated cluster (scheduler, kubelet, job, daemonset, disruption controllers) on a
manual clock: which pods go, which stay and why, PodDisruptionBudgets, 429 storms and the modes.

Two GPU nodes: everything starts on ``NODE`` (``OTHER`` is cordoned while the workloads start), then
``OTHER`` is opened, so replacements have somewhere to go while ``NODE`` is drained.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.clock import ManualClock
from remediation.kubernetes.drain.drainer import Drainer
from remediation.kubernetes.drain.policy import DrainMode, DrainPolicy, ModeRule
from remediation.kubernetes.drain.report import DrainReport, PodOutcome
from remediation.kubernetes.names import CORDONED_ANNOTATION
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim

CONTROLLERS = ("scheduler", "kubelet", "job", "daemonset", "disruption")
NS = "default"


class SettlingSleep:
    """The drain's ``sleep``: moves the manual clock, then lets the controllers catch up (no real waiting)."""

    def __init__(self, clock: ManualClock, sim: KubeSim) -> None:
        self.clock = clock
        self.sim = sim
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)
        self.sim.settle()


@pytest.fixture
def clock() -> ManualClock:
    """The one clock of the emulator and the drainer."""
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[KubeSim]:
    """Two GPU nodes; the second cordoned until the test's workloads run on the first."""
    with running_kube_sim(clock=clock, controllers=CONTROLLERS) as kube:
        build_fleet(kube.store, 2)
        kube.store.create("namespaces", {"metadata": {"name": "gpuhealth"}})
        kube.store.create("namespaces", {"metadata": {"name": "training"}})
        _set_unschedulable(kube, _names(kube)[1], True)
        yield kube


@pytest.fixture
def nodes(sim: KubeSim) -> tuple[str, str]:
    """(the node to drain, the healthy one)."""
    first, second = _names(sim)
    return first, second


@pytest.fixture
def make_drainer(sim: KubeSim, clock: ManualClock) -> Iterator[Callable[..., tuple[Drainer, SettlingSleep]]]:
    """Drainers on the emulator whose waits move the manual clock; seeded jitter."""
    clients = []

    def build(**policy: Any) -> tuple[Drainer, SettlingSleep]:
        api_client = sim.api_client()
        clients.append(api_client)
        sleep = SettlingSleep(clock, sim)
        drainer = Drainer(
            api_client, policy=DrainPolicy(**policy), clock=clock, sleep=sleep, rng=random.Random(7)
        )
        return drainer, sleep

    yield build
    for api_client in clients:
        api_client.close()


def _names(sim: KubeSim) -> list[str]:
    return sorted(node["metadata"]["name"] for node in sim.store.list("nodes"))


def _set_unschedulable(sim: KubeSim, name: str, value: bool) -> None:
    node = sim.store.get("nodes", None, name)
    assert node is not None
    node["spec"]["unschedulable"] = value
    sim.store.update("nodes", node)


def _container(**extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": "busybox"} | extra


def _pod(name: str, *, namespace: str = NS, node: str, **meta: Any) -> dict[str, Any]:
    """A pod bound to ``node``; ``meta`` goes into metadata (labels, annotations, ownerReferences)."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [_container()],
        "terminationGracePeriodSeconds": 5,
    }
    volumes = meta.pop("volumes", None)
    if volumes:
        spec["volumes"] = volumes
    return {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec}


def _owned_by(kind: str, name: str) -> list[dict[str, Any]]:
    api = "apps/v1" if kind in {"ReplicaSet", "StatefulSet", "DaemonSet"} else "batch/v1"
    uid = f"uid-{kind}-{name}".lower()
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}]


def _job(
    name: str, *, parallelism: int, namespace: str = NS, run_seconds: int | None = None
) -> dict[str, Any]:
    annotations = {"sim.gpuhealth.io/run-seconds": str(run_seconds)} if run_seconds else {}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 10,
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [_container()],
                    "terminationGracePeriodSeconds": 5,
                },
            },
        },
    }


def _daemonset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [_container()]}},
        },
    }


def _pdb(name: str, selector: dict[str, str], min_available: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
    }


def _start(sim: KubeSim, other: str, *objects: tuple[str, dict[str, Any]]) -> None:
    """Create the objects, let them run on the first node, then open the second."""
    for resource, obj in objects:
        sim.store.create(resource, obj)
    assert sim.settle(10)
    _set_unschedulable(sim, other, False)
    assert sim.settle(10)


def _pods_on(sim: KubeSim, node: str) -> dict[str, dict[str, Any]]:
    return {
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}": pod
        for pod in sim.store.list("pods")
        if pod["spec"].get("nodeName") == node
    }


def _outcomes(report: DrainReport) -> dict[str, PodOutcome]:
    return {f"{pod.namespace}/{pod.name}": pod.outcome for pod in report.pods}


def test_workload_pods_are_evicted_and_daemonset_mirror_and_agent_pods_stay(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """kubectl drain's filters: DaemonSet, mirror and the agent's own pods are skipped with a reason; Job and
    ReplicaSet pods are evicted and gone; the node is cordoned the executor's way (annotation)."""
    node, other = nodes
    _start(
        sim,
        other,
        ("daemonsets.apps", _daemonset("dcgm")),
        ("pods", _pod("etcd-mirror", node=node, annotations={"kubernetes.io/config.mirror": "abc"})),
        (
            "pods",
            _pod("agent-x", namespace="gpuhealth", node=node, labels={"app.kubernetes.io/name": "gpuhealth"}),
        ),
        ("pods", _pod("web-1", node=node, ownerReferences=_owned_by("ReplicaSet", "web"))),
        ("jobs.batch", _job("train", parallelism=2)),
    )
    drainer, _ = make_drainer()
    report = drainer.drain(node, incident_id="inc-1", deadline_s=300)

    outcomes = _outcomes(report)
    assert outcomes["default/etcd-mirror"] is PodOutcome.SKIPPED
    assert outcomes["gpuhealth/agent-x"] is PodOutcome.SKIPPED
    assert outcomes["default/web-1"] is PodOutcome.EVICTED
    assert [o for k, o in outcomes.items() if k.startswith("kube-system/dcgm")] == [PodOutcome.SKIPPED]
    assert [o for k, o in outcomes.items() if k.startswith("default/train")] == [PodOutcome.EVICTED] * 2
    reasons = {f"{p.namespace}/{p.name}": p.reason for p in report.pods}
    assert "mirror" in reasons["default/etcd-mirror"] and "agent" in reasons["gpuhealth/agent-x"]
    assert report.complete and report.cordoned and report.evictions == 3
    remaining = set(_pods_on(sim, node))
    assert remaining == {"default/etcd-mirror", "gpuhealth/agent-x"} | {
        key for key in outcomes if key.startswith("kube-system/dcgm")
    }
    stored = sim.store.get("nodes", None, node)
    assert stored is not None and stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][CORDONED_ANNOTATION] == "true"


def test_job_pods_evicted_get_disruption_target_and_are_replaced_on_another_node(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Evictions go through the Eviction API: each evicted pod carries DisruptionTarget
    (EvictionByEvictionAPI) and the Job controller starts replacements on the healthy node."""
    node, other = nodes
    _start(sim, other, ("jobs.batch", _job("train", parallelism=3)))
    reasons: list[str] = []

    def record(event: str, resource: str, obj: dict[str, Any]) -> None:
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if resource == "pods" and condition.get("type") == "DisruptionTarget" and event == "MODIFIED":
                reasons.append(f"{obj['metadata']['name']}:{condition.get('reason')}")

    sim.store.add_listener(record)
    drainer, _ = make_drainer()
    report = drainer.drain(node, incident_id="inc-2", deadline_s=300)
    sim.settle(10)

    evicted = {pod.name for pod in report.pods if pod.outcome is PodOutcome.EVICTED}
    assert len(evicted) == 3
    assert {reason.split(":")[0] for reason in reasons} == evicted
    assert {reason.split(":")[1] for reason in reasons} == {"EvictionByEvictionAPI"}
    replacements = [pod for pod in sim.store.list("pods", NS) if pod["metadata"]["name"] not in evicted]
    assert len(replacements) == 3
    assert {pod["spec"].get("nodeName") for pod in replacements} == {other}


def test_bare_and_emptydir_pods_refuse_the_drain_by_default_and_nothing_is_evicted(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Like kubectl without --force / --delete-emptydir-data: the drain names the pods and why, evicts
    nothing (the node stays cordoned), and the report is not complete."""
    node, other = nodes
    scratch = [{"name": "scratch", "emptyDir": {}}]
    _start(
        sim,
        other,
        ("pods", _pod("bare", node=node)),
        ("pods", _pod("cache", node=node, volumes=scratch, ownerReferences=_owned_by("ReplicaSet", "c"))),
        ("pods", _pod("web-1", node=node, ownerReferences=_owned_by("ReplicaSet", "web"))),
    )
    drainer, _ = make_drainer()
    report = drainer.drain(node, incident_id="inc-3", deadline_s=60)

    by_name = {pod.name: pod for pod in report.pods}
    assert by_name["bare"].outcome is PodOutcome.REFUSED and "force" in by_name["bare"].reason
    assert by_name["cache"].outcome is PodOutcome.REFUSED and "emptyDir" in by_name["cache"].reason
    assert by_name["web-1"].outcome is PodOutcome.NOT_ATTEMPTED
    assert not report.complete and report.cordoned
    assert set(_pods_on(sim, node)) == {"default/bare", "default/cache", "default/web-1"}


def test_force_and_delete_emptydir_data_let_those_pods_be_evicted(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """With kubectl's --force and --delete-emptydir-data semantics, the same pods are evicted."""
    node, other = nodes
    scratch = [{"name": "scratch", "emptyDir": {}}]
    _start(
        sim,
        other,
        ("pods", _pod("bare", node=node)),
        ("pods", _pod("cache", node=node, volumes=scratch, ownerReferences=_owned_by("ReplicaSet", "c"))),
    )
    drainer, _ = make_drainer(force=True, delete_emptydir_data=True)
    report = drainer.drain(node, incident_id="inc-4", deadline_s=120)
    assert _outcomes(report) == {"default/bare": PodOutcome.EVICTED, "default/cache": PodOutcome.EVICTED}
    assert report.complete and _pods_on(sim, node) == {}


def test_a_blocking_pdb_is_retried_with_jittered_backoff_then_the_pod_ends_blocked(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """429 from a PodDisruptionBudget: retried with waits between half and all of the doubling backoff
    (capped), never overriding the budget; at the deadline the pod is blocked and still running."""
    node, other = nodes
    owner = _owned_by("ReplicaSet", "db")
    _start(
        sim,
        other,
        ("pods", _pod("db-0", node=node, labels={"app": "db"}, ownerReferences=owner)),
        ("poddisruptionbudgets.policy", _pdb("db", {"app": "db"}, min_available=1)),
        ("pods", _pod("web-1", node=node, ownerReferences=_owned_by("ReplicaSet", "web"))),
    )
    drainer, sleep = make_drainer(retry_initial_s=1.0, retry_max_s=4.0)
    report = drainer.drain(node, incident_id="inc-5", deadline_s=30)

    by_name = {pod.name: pod for pod in report.pods}
    assert by_name["db-0"].outcome is PodOutcome.BLOCKED and "429" in by_name["db-0"].reason
    assert by_name["db-0"].attempts >= 5
    assert by_name["web-1"].outcome is PodOutcome.EVICTED
    assert not report.complete
    backoffs = [wait for wait in sleep.waits if wait != drainer.policy.poll_interval_s]
    assert backoffs and all(0.5 <= wait <= 4.0 for wait in backoffs)
    assert len(set(backoffs)) > 1, "jitter spreads the waits"
    assert "default/db-0" in _pods_on(sim, node)


def test_a_429_storm_backs_off_at_least_retry_after_then_evicts(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Throttling (429 with Retry-After) on the eviction subresource: every wait is at least what the server
    asked, and the pods go once the storm passes."""
    node, other = nodes
    pods = [_pod(f"web-{i}", node=node, ownerReferences=_owned_by("ReplicaSet", "web")) for i in range(4)]
    _start(sim, other, *(("pods", pod) for pod in pods))
    sim.faults.inject(verb="create", resource="pods/eviction", status=429, retry_after=3, times=8)
    drainer, sleep = make_drainer(retry_initial_s=0.1, retry_max_s=1.0)
    report = drainer.drain(node, incident_id="inc-6", deadline_s=300)

    assert report.complete and report.evictions == 4
    assert sum(pod.attempts for pod in report.pods) == 4 + 8
    backoffs = [wait for wait in sleep.waits if wait != drainer.policy.poll_interval_s]
    assert len(backoffs) == 8 and all(wait >= 3 for wait in backoffs)


def test_several_pdbs_500_fails_that_pod_without_retrying(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """A pod matched by two budgets answers 500: retrying cannot help, the pod fails at once with a reason."""
    node, other = nodes
    owner = _owned_by("ReplicaSet", "db")
    _start(
        sim,
        other,
        ("pods", _pod("db-0", node=node, labels={"app": "db"}, ownerReferences=owner)),
        ("poddisruptionbudgets.policy", _pdb("db-a", {"app": "db"}, min_available=0)),
        ("poddisruptionbudgets.policy", _pdb("db-b", {"app": "db"}, min_available=0)),
    )
    drainer, _ = make_drainer()
    report = drainer.drain(node, incident_id="inc-7", deadline_s=60)
    (pod,) = report.pods
    assert pod.outcome is PodOutcome.FAILED and pod.attempts == 1
    assert "500" in pod.reason


def test_delete_after_timeout_waits_for_checkpoint_time_and_immediate_pods_go_first(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Mode per namespace: training pods get their checkpoint wait before eviction; others go at once."""
    node, other = nodes
    trainer = _pod("trainer-0", namespace="training", node=node, ownerReferences=_owned_by("Job", "t"))
    _start(
        sim,
        other,
        ("pods", trainer),
        ("pods", _pod("web-1", node=node, ownerReferences=_owned_by("ReplicaSet", "web"))),
    )
    rule = ModeRule(namespace="training", mode=DrainMode.DELETE_AFTER_TIMEOUT, timeout_s=60)
    drainer, _ = make_drainer(modes=(rule,))
    report = drainer.drain(node, incident_id="inc-8", deadline_s=300)

    by_name = {pod.name: pod for pod in report.pods}
    assert by_name["trainer-0"].outcome is PodOutcome.EVICTED and by_name["trainer-0"].seconds >= 60
    assert by_name["trainer-0"].mode == "delete-after-timeout"
    assert by_name["web-1"].outcome is PodOutcome.EVICTED and by_name["web-1"].seconds < 30


def test_allow_completion_lets_a_job_pod_finish_and_evicts_a_long_one_at_its_deadline(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """allow-completion: a Job pod that finishes within the deadline succeeds (counted by its Job, not
    failed); one that would run longer is evicted when the deadline passes."""
    node, other = nodes
    _start(
        sim,
        other,
        ("jobs.batch", _job("short", parallelism=1, run_seconds=20)),
        ("jobs.batch", _job("long", parallelism=1, run_seconds=10_000)),
    )
    rule = ModeRule(match_labels={}, mode=DrainMode.ALLOW_COMPLETION, timeout_s=90)
    drainer, _ = make_drainer(modes=(rule,))
    report = drainer.drain(node, incident_id="inc-9", deadline_s=600)
    sim.settle(10)

    by_job = {pod.name.split("-")[0]: pod for pod in report.pods}
    assert by_job["short"].outcome is PodOutcome.EVICTED and by_job["short"].seconds < 90
    assert by_job["long"].outcome is PodOutcome.EVICTED and by_job["long"].seconds >= 90
    short = sim.store.get("jobs.batch", NS, "short")
    assert short is not None and short["status"].get("succeeded") == 1
    assert not short["status"].get("failed")


def test_a_pod_that_does_not_leave_by_its_deadline_is_reported_timed_out(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Per-pod deadline: an evicted pod with a 600 s grace period is still terminating after pod_timeout_s;
    the drain returns then (not after the grace period) and says so."""
    node, other = nodes
    slow = _pod("slow", node=node, ownerReferences=_owned_by("ReplicaSet", "slow"))
    slow["spec"]["terminationGracePeriodSeconds"] = 600
    _start(sim, other, ("pods", slow))
    drainer, _ = make_drainer(pod_timeout_s=40)
    report = drainer.drain(node, incident_id="inc-10", deadline_s=300)
    (pod,) = report.pods
    assert pod.outcome is PodOutcome.TIMED_OUT and 40 <= pod.seconds < 60
    assert report.seconds < 60 and not report.complete
    stored = sim.store.get("pods", NS, "slow")
    assert stored is not None and stored["metadata"].get("deletionTimestamp")


def test_evictions_run_concurrently_but_never_more_than_max_in_flight(
    sim: KubeSim, nodes: tuple[str, str], make_drainer: Callable[..., tuple[Drainer, SettlingSleep]]
) -> None:
    """Bounded concurrency, not a trickle: with each eviction answer delayed 0.1 s, 9 pods and a bound of 3,
    exactly 3 requests are in flight at the peak."""
    node, other = nodes
    pods = [_pod(f"web-{i}", node=node, ownerReferences=_owned_by("ReplicaSet", "web")) for i in range(9)]
    _start(sim, other, *(("pods", pod) for pod in pods))
    sim.faults.inject(verb="create", resource="pods/eviction", status=None, delay=0.1, times=9)
    drainer, _ = make_drainer(max_in_flight=3)
    lock = threading.Lock()
    in_flight, peak = 0, 0
    send = drainer.api.evict

    def counted(namespace: str, name: str, **options: Any) -> None:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        try:
            send(namespace, name, **options)
        finally:
            with lock:
                in_flight -= 1

    drainer.api.evict = counted  # type: ignore[method-assign]
    report = drainer.drain(node, incident_id="inc-11", deadline_s=300)
    assert report.complete and report.evictions == 9
    assert peak == 3
