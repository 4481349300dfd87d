"""The partial drain against the emulated cluster: one bad GPU of eight on an inference node.

Eight single-GPU inference pods run on ``NODE``; the kubelet's PodResources service (``sim.kube.podresources``,
real gRPC on a unix socket) says which pod holds which GPU. A ``Drain`` limited to the bad GPU evicts only
the pod on it, without a cordon: the other seven keep running where they are, and the Job's replacement
lands on the other node (our node taint keeps it off ``NODE``, as without DRA). When the mapping cannot be
read, the drain falls back to the whole node, cordon included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from dra_slices import RESOURCE_SLICES, gpu_slice
from waiting import HANG_GUARD_S

from agent.backends.podresources import PodResourcesClient, gpu_pod_map
from core.clock import ManualClock
from core.gpu_pods import DraKey, GpuPodMap
from core.steps import Drain, SetTaint
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.runner import DrainSetup
from remediation.kubernetes.executor import KubernetesExecutor
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim, running_kube_sim
from sim.kube.podresources import PodResourcesServer

CONTROLLERS = ("scheduler", "kubelet", "job", "daemonset", "disruption")
UUIDS = [f"GPU-5c1f8d6e-0f8a-4c1e-9a55-3b7f2c9d0a1{index}" for index in range(8)]
BAD = UUIDS[3]


class SettlingSleep:
    """The drain's ``sleep``: moves the manual clock, then lets the controllers catch up."""

    def __init__(self, clock: ManualClock, sim: KubeSim) -> None:
        self.clock = clock
        self.sim = sim

    def __call__(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.sim.settle()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def empty_sim(clock: ManualClock) -> Iterator[KubeSim]:
    """Two 8-GPU nodes and the controllers, nothing running yet."""
    with running_kube_sim(clock=clock, controllers=CONTROLLERS) as kube:
        build_fleet(kube.store, 2)
        yield kube


@pytest.fixture
def sim(empty_sim: KubeSim) -> KubeSim:
    """Eight one-GPU inference pods (device plugin) started on the first node while the second is cordoned."""
    _node, other = _names(empty_sim)
    _set_unschedulable(empty_sim, other, True)
    empty_sim.store.create("jobs.batch", _inference_job(8))
    assert empty_sim.settle(10)
    _set_unschedulable(empty_sim, other, False)
    assert empty_sim.settle(10)
    return empty_sim


@pytest.fixture
def kubelet(sim: KubeSim, tmp_path: Path) -> Iterator[PodResourcesServer]:
    server = PodResourcesServer(sim.store, _names(sim)[0], UUIDS, str(tmp_path / "kubelet.sock")).start()
    yield server
    server.stop()


@pytest.fixture
def make_executor(empty_sim: KubeSim, clock: ManualClock) -> Iterator[Callable[..., KubernetesExecutor]]:
    """The executor of the first node, its drain reading PodResources at ``socket``."""
    built: list[KubernetesExecutor] = []

    def build(socket: str, *, dra: bool = False, force: bool = False) -> KubernetesExecutor:
        client = PodResourcesClient(socket, timeout_s=HANG_GUARD_S)
        node = _names(empty_sim)[0]

        def read(dra: Mapping[DraKey, str]) -> GpuPodMap:
            return gpu_pod_map(node, client.list(), dra_devices=dra)

        policy = DrainPolicy(force=force)
        setup = DrainSetup(
            drain_policy=policy, clock=clock, sleep=SettlingSleep(clock, empty_sim), gpu_pods=read
        )
        executor = KubernetesExecutor(
            empty_sim.api_client(),
            node,
            watch=False,
            clock=clock.now,
            drain=setup,
            dra_driver="gpu.nvidia.com" if dra else None,
        )
        executor._owns_client = True
        built.append(executor)
        return executor

    yield build
    for executor in built:
        executor.close()


def test_only_the_pod_on_the_bad_gpu_moves_and_seven_keep_running(
    sim: KubeSim, kubelet: PodResourcesServer, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """Runbook: one bad GPU of eight on an inference node -> node tainted, partial drain -> the pod on that
    GPU evicted and replaced on the other node; the seven others untouched (same uids, same node); the node
    not cordoned; the drain's line says it was partial."""
    node, other = _names(sim)
    before = _pods_on(sim, node)
    victim = next(key for key, gpus in kubelet.allocations().items() if gpus == [BAD])
    executor = make_executor(kubelet.socket_path)

    report = executor.apply([SetTaint("reset_gpu"), Drain("inc-1", 300.0, gpus=(BAD,))])

    assert all(result.ok for result in report.results), report.results
    assert executor.wait_for_drain(HANG_GUARD_S)
    state = executor.drain_state
    assert state is not None and str(state.phase) == "complete", state
    assert sim.settle(10)
    after = _pods_on(sim, node)
    assert set(after) == set(before) - {victim}
    assert {key: pod["metadata"]["uid"] for key, pod in after.items()} == {
        key: before[key]["metadata"]["uid"] for key in after
    }
    replacements = [pod for pod in _pods_on(sim, other).values() if pod["status"].get("phase") == "Running"]
    assert len(replacements) == 1
    stored = sim.store.get("nodes", None, node)
    assert stored is not None and not stored["spec"].get("unschedulable")
    updates = executor.drain_updates()
    assert any(
        "partial drain of GPUs" in update.detail and "7 pods kept" in update.detail for update in updates
    )
    assert kubelet.calls >= 1


def test_an_unreadable_mapping_drains_the_whole_node(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    """No PodResources socket: the drain cannot tell which pod holds the bad GPU, so it drains the whole
    node the usual way (cordon included) and says why."""
    node, _other = _names(sim)
    executor = make_executor(str(tmp_path / "missing.sock"))

    executor.apply([SetTaint("reset_gpu"), Drain("inc-1", 300.0, gpus=(BAD,))])

    assert executor.wait_for_drain(HANG_GUARD_S)
    assert sim.settle(10)
    assert not [pod for pod in _pods_on(sim, node).values() if pod["status"].get("phase") == "Running"]
    stored = sim.store.get("nodes", None, node)
    assert stored is not None and stored["spec"].get("unschedulable") is True
    assert any("GPU-to-pod mapping unreadable" in update.detail for update in executor.drain_updates())


def test_without_the_socket_a_dra_node_reads_its_pods_resource_claims(
    empty_sim: KubeSim, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    """No PodResources socket, but the node's GPUs are DRA devices: the pods' ResourceClaims (allocated
    device -> the slice's GPU UUID) say which pod holds the bad GPU; only that pod is evicted."""
    node, _other = _names(empty_sim)
    empty_sim.store.create(RESOURCE_SLICES, gpu_slice(node, UUIDS))
    for index in range(3):
        _claimed_pod(empty_sim, node, index)
    executor = make_executor(str(tmp_path / "missing.sock"), dra=True, force=True)
    assert executor.facts().dra_gpus == tuple(sorted(UUIDS))

    executor.apply([SetTaint("reset_gpu"), Drain("inc-1", 300.0, gpus=(UUIDS[1],))])

    assert executor.wait_for_drain(HANG_GUARD_S)
    assert empty_sim.settle(10)
    assert set(_pods_on(empty_sim, node)) == {"ml/llm-0", "ml/llm-2"}
    assert any("(from dra-claims)" in update.detail for update in executor.drain_updates())


def test_claims_cannot_place_device_plugin_gpus_so_the_whole_node_is_drained(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor], tmp_path: Path
) -> None:
    """A DRA node whose pods hold nvidia.com/gpu from the device plugin: no claim names those GPUs, so the
    claims cannot say who holds the bad one; without the socket the drain is the whole node's."""
    node, _other = _names(sim)
    sim.store.create(RESOURCE_SLICES, gpu_slice(node, UUIDS))
    executor = make_executor(str(tmp_path / "missing.sock"), dra=True)
    executor.facts()

    executor.apply([SetTaint("reset_gpu"), Drain("inc-1", 300.0, gpus=(BAD,))])

    assert executor.wait_for_drain(HANG_GUARD_S)
    assert any("holds a device-plugin GPU" in update.detail for update in executor.drain_updates())
    stored = sim.store.get("nodes", None, node)
    assert stored is not None and stored["spec"].get("unschedulable") is True


def _claimed_pod(sim: KubeSim, node: str, index: int) -> None:
    """A pod on ``node`` whose claim the scheduler allocated device ``gpu-<index>`` of the node's pool."""
    if sim.store.get("namespaces", None, "ml") is None:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
    claim = f"llm-{index}-gpu"
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{index}"}
    sim.store.create(
        "resourceclaims.resource.k8s.io",
        {
            "metadata": {"name": claim, "namespace": "ml"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
            "status": {"allocation": {"devices": {"results": [result]}}},
        },
    )
    pod = {
        "metadata": {"name": f"llm-{index}", "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "server", "image": "vllm", "resources": {"claims": [{"name": "gpu"}]}}],
            "terminationGracePeriodSeconds": 5,
        },
    }
    sim.store.create("pods", pod)
    assert sim.settle(10)


def _names(sim: KubeSim) -> list[str]:
    return sorted(node["metadata"]["name"] for node in sim.store.list("nodes"))


def _set_unschedulable(sim: KubeSim, name: str, value: bool) -> None:
    node = sim.store.get("nodes", None, name)
    assert node is not None
    node["spec"]["unschedulable"] = value
    sim.store.update("nodes", node)


def _pods_on(sim: KubeSim, node: str) -> dict[str, dict[str, Any]]:
    return {
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}": pod
        for pod in sim.store.list("pods")
        if pod["spec"].get("nodeName") == node and pod["status"].get("phase") not in ("Succeeded", "Failed")
    }


def _inference_job(replicas: int) -> dict[str, Any]:
    """A Job whose pods keep running, one GPU each (the emulator's stand-in for a Deployment)."""
    container = {"name": "server", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": "inference", "namespace": "default"},
        "spec": {
            "parallelism": replicas,
            "completions": replicas,
            "backoffLimit": 10,
            "template": {
                "metadata": {"labels": {"app": "inference"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "terminationGracePeriodSeconds": 5,
                },
            },
        },
    }
