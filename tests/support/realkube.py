"""Per-test clusters on the shared real control plane (``control_plane.py``), and an agent rig for them.

The control plane is started once per test process; each test gets a :class:`Cluster` of its own: nodes
with names no other test uses (run by KWOK; with ``kwok=False`` registered and kept alive by
``fake_kubelet.FakeKubelets``), its own namespace, and an admin client. :class:`RealGpuNode` is ``scenario_rig.GpuNode`` for the real API server:
the same ``build_agent`` wiring, fake NVML, manual clock for the agent's debounce and the executor's retry
sleeps, but every read of the node goes through the API server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path
from typing import Any

from control_plane import ControlPlane, ControlPlaneUnavailable
from fake_kubelet import FakeKubelets
from kube_stack import how_to_build
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from scenario_rig import GpuNodeRig
from waiting import wait_until

from agent.settings import AgentSettings
from core.clock import ManualClock
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from sim.realkube.nodes import create_kwok_node

TAINT_KEY = "gpuhealth.io/unhealthy"

_serial = itertools.count()


def unique_prefix() -> str:
    """``<worker>-t<n>``: node and namespace names no other test of this run uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"{worker}-t{next(_serial)}-{os.getpid() % 10000}"


class Cluster:
    """Nodes, a namespace and an admin client of one test on the shared control plane."""

    def __init__(
        self,
        plane: ControlPlane,
        *,
        nodes: int = 2,
        gpus: int = 8,
        kwok: bool = True,
        namespace_labels: dict[str, str] | None = None,
    ) -> None:
        """``kwok``: KWOK runs the nodes (:class:`ControlPlaneUnavailable` when it is not built); with False
        hand-written kubelets do (``fake_kubelet``: for tests of a kubelet's identity or silence).
        ``namespace_labels``: e.g. a manager's ``Controller.namespace_label``. Pods are placed by
        kube-scheduler (the ``kube_stack`` fixture skips without it)."""
        if kwok and not plane.kwok:
            raise ControlPlaneUnavailable(how_to_build("kwok"))
        self.plane = plane
        prefix = unique_prefix()
        self.namespace = f"{prefix}-ns"
        self.node_names = [f"{prefix}-gpu-{i}" for i in range(nodes)]
        self.admin = plane.api_client()
        self.core = client.CoreV1Api(self.admin)
        self.core.create_namespace(
            {"metadata": {"name": self.namespace, "labels": dict(namespace_labels or {})}}
        )
        self.kubelets: FakeKubelets | None = None
        if kwok:
            for name in self.node_names:
                self._kwok_node(name, gpus)
        else:
            self.kubelets = FakeKubelets(plane, self.node_names, gpus=gpus).start()
        # A node is created with node.kubernetes.io/not-ready:NoSchedule (TaintNodesByCondition); the node
        # lifecycle controller removes it once it sees Ready=True. Tests start from nodes without it.
        assert wait_until(self._untainted), "the node lifecycle controller never took the not-ready taint off"

    def _kwok_node(self, name: str, gpus: int) -> None:
        """A Node as the GPU operator's node reports itself (``sim.kube.fleet.gpu_node``: labels, capacity
        with ``nvidia.com/gpu``), annotated for KWOK, whose stages make it Ready and whose Lease controller
        renews its Lease."""
        create_kwok_node(self.core, name, gpus)

    def _untainted(self) -> bool:
        return all(
            not [
                t
                for t in self.node(n)["spec"].get("taints") or []
                if t["key"].startswith("node.kubernetes.io/")
            ]
            for n in self.node_names
        )

    def close(self) -> None:
        if self.kubelets is not None:
            self.kubelets.stop()
        else:
            for name in self.node_names:
                with contextlib.suppress(ApiException):
                    self.core.delete_node(name)
                with contextlib.suppress(ApiException):
                    client.CoordinationV1Api(self.admin).delete_namespaced_lease(name, "kube-node-lease")
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)
        self.admin.close()
        self.plane.check_running()

    def to_dict(self, obj: Any) -> dict[str, Any]:
        value: dict[str, Any] = self.admin.sanitize_for_serialization(obj)
        return value

    def node(self, name: str) -> dict[str, Any]:
        return self.to_dict(self.core.read_node(name))

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector or None)
        return [self.to_dict(pod) for pod in listed.items]

    def running(self, **labels: str) -> list[dict[str, Any]]:
        """Running, not terminating pods of the namespace carrying ``labels``."""
        return [
            pod
            for pod in self.pods(**labels)
            if pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
        ]

    def node_events(self, name: str) -> list[dict[str, Any]]:
        """Core Events in ``default`` about node ``name``, in the order they were created (by the store's
        revision: timestamps have one-second resolution)."""
        listed = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
        events = [self.to_dict(e) for e in listed.items]
        return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))


class RealGpuNode(GpuNodeRig[KubernetesExecutor]):
    """The scenario rig's GPU node (``scenario_rig.GpuNodeRig``) against the real API server: one node of a
    :class:`Cluster` and its agent, whose executor talks to kube-apiserver with ``api_client``."""

    def __init__(
        self, cluster: Cluster, node: str, clock: ManualClock, state_dir: Path, api_client: client.ApiClient
    ) -> None:
        super().__init__(clock, state_dir, node)
        self.cluster = cluster
        self.api_client = api_client

    def settings(self, **common: Any) -> AgentSettings:
        retry = RetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0)
        return AgentSettings(**common, kubernetes={"retry": retry})

    def connect(self, settings: AgentSettings) -> KubernetesExecutor:
        return KubernetesExecutor(
            self.api_client,
            self.name,
            retry=settings.kubernetes.retry,
            clock=self.clock.now,
            sleep=self.sleep,
        )

    # --- what the API server holds -------------------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        return self.cluster.node(self.name)

    def condition(self, kind: str = "GPUHealthy") -> dict[str, Any] | None:
        return next((c for c in self.node()["status"].get("conditions", []) if c["type"] == kind), None)

    def label(self) -> str | None:
        labels: dict[str, str] = self.node()["metadata"].get("labels", {})
        return labels.get("gpuhealth.io/state")

    def taint(self) -> str | None:
        ours = [t for t in self.node()["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
        assert len(ours) <= 1
        return f"{ours[0].get('value')}:{ours[0]['effect']}" if ours else None

    def cordoned(self) -> bool:
        return bool(self.node()["spec"].get("unschedulable"))

    def events(self) -> list[str]:
        """Reasons of the agent's Events about this node (``GPUHealth*``; the node lifecycle controller
        records its own, such as RegisteredNode, whenever it gets to it)."""
        return [
            e["reason"] for e in self.cluster.node_events(self.name) if e["reason"].startswith("GPUHealth")
        ]
