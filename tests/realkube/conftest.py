"""Fixtures of the tests against a real control plane (etcd, kube-apiserver, kube-controller-manager).

One control plane per test process (session scope, like the PostgreSQL server of the aggregator tests);
each test gets its own nodes and namespace on it (``realkube.Cluster``). Without the binaries these tests
skip with one line saying how to build them, except in CI (``CI`` set), where that fails the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from control_plane import ControlPlane, ControlPlaneUnavailable, find_binaries
from kube_stack import Controller, how_to_build
from kubernetes import client
from realkube import Cluster, RealGpuNode

from core.clock import ManualClock


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on loopback; stopped and removed at the end."""
    try:
        binaries = find_binaries()
    except ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    with ControlPlane(binaries) as plane:
        yield plane


@pytest.fixture
def cluster(kube_stack: ControlPlane) -> Iterator[Cluster]:
    """Two KWOK GPU nodes of this test and a namespace, on the shared control plane (pods placed by
    kube-scheduler)."""
    made = Cluster(kube_stack, nodes=2)
    yield made
    made.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def gpu_node(cluster: Cluster, clock: ManualClock, tmp_path: Path) -> Iterator[RealGpuNode]:
    """The first node of the cluster with 8 fake H100s and its agent (admin credentials), started on use."""
    api_client = cluster.plane.api_client()
    node = RealGpuNode(cluster, cluster.node_names[0], clock, tmp_path / "state", api_client)
    yield node
    node.close()
    api_client.close()


@pytest.fixture
def human(cluster: Cluster) -> Iterator[client.CoreV1Api]:
    """A person with kubectl: another identity (system:masters) on the same API server."""
    api_client = cluster.plane.api_client(user="alice", groups=("system:masters",))
    yield client.CoreV1Api(api_client)
    api_client.close()


def _unavailable(exc: ControlPlaneUnavailable) -> None:
    if os.environ.get("CI"):
        pytest.fail(str(exc))
    pytest.skip(str(exc))


@pytest.fixture(scope="session")
def kube_stack(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with kube-scheduler and KWOK (skips, or fails in CI, when they are not built)."""
    for name, present in (("kube-scheduler", control_plane.scheduler), ("kwok", control_plane.kwok)):
        if not present:
            _unavailable(ControlPlaneUnavailable(how_to_build(name)))
    return control_plane


def _manager(plane: ControlPlane, name: str, feature_gates: dict[str, bool] | None = None) -> Controller:
    try:
        return plane.controller(name, feature_gates=feature_gates)
    except ControlPlaneUnavailable as exc:
        _unavailable(exc)
        raise


@pytest.fixture
def jobset(kube_stack: ControlPlane) -> Controller:
    """The real JobSet manager (its webhooks on), started on first use for the rest of the session."""
    return _manager(kube_stack, "jobset")


@pytest.fixture
def kueue(kube_stack: ControlPlane) -> Controller:
    """The real Kueue manager (with JobSet and Trainer when built), started on first use, with its default
    feature gates (restarted with them if a test changed them)."""
    return _manager(kube_stack, "kueue", {})


@pytest.fixture
def kueue_with(kube_stack: ControlPlane) -> Callable[[dict[str, bool]], Controller]:
    """Kueue with the given feature gates (restarted when it runs with others)."""
    return lambda gates: _manager(kube_stack, "kueue", gates)


@pytest.fixture
def trainer(kube_stack: ControlPlane) -> Controller:
    """The real Trainer manager (with JobSet), started on first use."""
    return _manager(kube_stack, "trainer")
