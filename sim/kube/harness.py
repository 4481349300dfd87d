"""``KubeSim``: the emulated Kubernetes API server, its store and its controllers, as one object.

Typical use in a test::

    with KubeSim(nodes=4) as sim:
        core = kubernetes.client.CoreV1Api(sim.api_client())
        core.list_node()

Everything runs in this process: uvicorn serves HTTP on 127.0.0.1 from a background thread, the
controller manager reconciles from another. Time-based behaviour (grace periods, controller delays)
follows ``core.clock``, so a test with a :class:`~core.clock.ManualClock` moves time
instead of sleeping.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

from core.clock import Clock, RealClock
from sim.kube.api import KubeApi
from sim.kube.faults import FaultInjector
from sim.kube.kubeconfig import DUMMY_TOKEN, write_kubeconfig
from sim.kube.manager import ControllerManager
from sim.kube.protocols import Controller, KubeObject
from sim.kube.resources import CustomResource, ResourceRegistry
from sim.kube.server import ApiServer, KubeApp
from sim.kube.store import MemoryStore
from sim.kube.token_review import TokenReviewer
from sim.kube.watch import WatchHub

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = structlog.get_logger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
KUBELET_CONTROLLER = "kubelet"


def minimal_gpu_node(name: str, gpus: int = 8) -> KubeObject:
    """A Ready node advertising ``nvidia.com/gpu`` (used when the fleet builder is not available)."""
    capacity = {"cpu": "96", "memory": "1048576Mi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H200",
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"boot-{name}",
                "containerRuntimeVersion": "containerd://2.1.0",
                "kernelVersion": "6.8.0-gpuhealth",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.37.0",
                "machineID": f"machine-{name}",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04 LTS",
                "systemUUID": f"uuid-{name}",
            },
        },
    }


def _fleet_builder() -> Callable[..., None] | None:
    try:
        module = importlib.import_module("sim.kube.fleet")
    except ImportError:
        return None
    builder = getattr(module, "build_fleet", None)
    return builder if callable(builder) else None


def add_gpu_nodes(store: MemoryStore, count: int) -> None:
    """Create ``count`` GPU nodes with the fleet builder when present, else minimal ones."""
    builder = _fleet_builder()
    if builder is not None:
        builder(store, count)
        return
    for index in range(count):
        store.create("nodes", minimal_gpu_node(f"gpu-node-{index:04d}"))


def _default_controllers(options: Any) -> list[Controller]:
    try:
        module = importlib.import_module("sim.kube.controllers")
    except ImportError:
        log.warning("sim.kube.controllers is not available: running without controllers")
        return []
    factory = module.default_controllers
    controllers: list[Controller] = list(factory(options))
    return controllers


class KubeSim:
    """An emulated cluster: API server over HTTP, object store, controller manager, fault injector."""

    def __init__(
        self,
        clock: Clock | None = None,
        nodes: int = 0,
        custom_resources: Iterable[CustomResource] = (),
        controllers: bool | Iterable[str] = True,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        history_size: int = 10_000,
        bookmark_interval_s: float = 1.0,
        controller_options: Any = None,
        controller_interval_s: float = 0.1,
        workloads: bool = False,
    ) -> None:
        """``controllers``: True for all default controllers, False for none, or the names to enable.

        ``host``: the address the API server listens on (a test's own network namespace link; loopback by
        default).

        ``workloads``: also serve the training-job operators' custom resources (JobSet, TrainJob,
        PyTorchJob, Kueue, Volcano; ``sim.kube.workload_crds``), which their controllers then run.
        """
        self.clock: Clock = clock or RealClock()
        if workloads:
            from sim.kube.workload_crds import WORKLOAD_CRDS

            custom_resources = [*custom_resources, *WORKLOAD_CRDS]
        self.registry = ResourceRegistry.with_builtins(custom_resources)
        self.store = MemoryStore(self.registry, self.clock, history_size=history_size)
        self.faults = FaultInjector(self.clock)
        available = _default_controllers(controller_options) if controllers is not False else []
        enabled = None if controllers is True or controllers is False else list(controllers)
        self.manager = ControllerManager(
            self.store, available, interval_s=controller_interval_s, enabled=enabled
        )
        self.api = KubeApi(self.store, server_removes_pods=self._no_kubelet)
        self.hub = WatchHub(bookmark_interval_s)
        self.token_reviews = TokenReviewer()  # issue ServiceAccount tokens the API server then reviews
        self.server = ApiServer(
            KubeApp(self.api, self.faults, self.hub, self.token_reviews), host=host, port=port
        )
        self.faults.bind_listener(self.server.stop, self.server.start)
        self._initial_nodes = nodes
        self._started = False

    def _no_kubelet(self) -> bool:
        return not self.manager.is_enabled(KUBELET_CONTROLLER)

    @property
    def url(self) -> str:
        """The API server's base URL, ``http://127.0.0.1:PORT``."""
        return self.server.url

    def start(self) -> KubeSim:
        """Create the system namespaces and the initial nodes, then start controllers and HTTP."""
        if self._started:
            return self
        for namespace in SYSTEM_NAMESPACES:
            if self.store.get_entry("namespaces", None, namespace) is None:
                self.store.create("namespaces", {"metadata": {"name": namespace}})
        if self._initial_nodes:
            add_gpu_nodes(self.store, self._initial_nodes)
        self.server.start()
        self.manager.start()
        self._started = True
        log.info("kube sim started", url=self.url, nodes=self._initial_nodes)
        return self

    def stop(self) -> None:
        """Stop controllers and the HTTP listener (open watches end)."""
        self.manager.stop()
        self.server.stop()
        self._started = False

    def __enter__(self) -> KubeSim:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server (usable by the Python client and kubectl)."""
        return write_kubeconfig(path, self.url)

    def api_client(self) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` configured for this server."""
        from kubernetes import client

        configuration = client.Configuration(
            host=self.url, api_key={"authorization": f"Bearer {DUMMY_TOKEN}"}
        )
        return client.ApiClient(configuration)

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until the controllers have nothing left to do; False on timeout."""
        return self.manager.wait_idle(timeout_s)


@contextlib.contextmanager
def running_kube_sim(**kwargs: Any) -> Iterator[KubeSim]:
    """A started :class:`KubeSim` for the duration of a ``with`` block (the basis of pytest fixtures)."""
    sim = KubeSim(**kwargs)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()
