"""The fleet-scale benchmark's stack: a real control plane with KWOK GPU nodes, a training Deployment placed
by kube-scheduler, an aggregator process, agent hosts and an outside watcher.

- The control plane is the tests' (``tests/support/control_plane.py``): etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler and KWOK, built by ``tools/build-control-plane.sh``.
- Nodes are created as the GPU Operator's nodes report themselves (``sim.kube.fleet.gpu_node``: its labels,
  ``nvidia.com/gpu: 8``), annotated for KWOK, which makes them Ready and renews their Leases.
- The aggregator is a process of its own (``python -m aggregator``, SQLite), with its central remediator
  configured against the real API server (the admin's kubeconfig).
- Agents run in host processes (``sim.scenario.hosts``), each host a share of the nodes, each agent its own
  watch of its own node through the real API server (HTTPS, the plane's CA).
- :class:`FleetWatcher` is the outside client: a watch of every node (taint and cordon transitions) and of
  the benchmark's pods (where each runs, when it is Running, when it goes).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from sim.aggregator_child import AggregatorChild
from sim.kube.fleet import gpu_node
from sim.scenario.kube_orchestrator import SHARED_POOL_CONNECTIONS, kube_agent

log = structlog.get_logger("bench.fleet_scale")

SUPPORT = Path(__file__).resolve().parent.parent / "tests" / "support"
TAINT_KEY = "gpuhealth.io/unhealthy"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NAMESPACE = "fleet-scale"
DEPLOYMENT = "train"
APP_LABEL = "gpuhealth.io/bench"
CREATORS = 8


def import_control_plane() -> Any:
    """The tests' control-plane helper module (``tests/support`` on the path, as ``bench.fault_to_taint``)."""
    if str(SUPPORT) not in sys.path:
        sys.path.insert(0, str(SUPPORT))
    import control_plane

    return control_plane


@dataclass(frozen=True)
class RealKubeConnector:
    """Agents in a host process reach the real API server at ``url`` (HTTPS, ``ca_file``) with ``token``;
    one shared API client per host process (``SHARED_POOL_CONNECTIONS``), as the demo's hosts do."""

    url: str
    token: str
    ca_file: str

    def agent_builder(self) -> Callable[[AgentSettings, NvmlLibrary], Agent]:
        configuration = client.Configuration(
            host=self.url, api_key={"authorization": f"Bearer {self.token}"}, ssl_ca_cert=self.ca_file
        )
        configuration.connection_pool_maxsize = SHARED_POOL_CONNECTIONS
        api_client = client.ApiClient(configuration)
        return lambda settings, library: kube_agent(settings, library, api_client)


# --- nodes and pods ---------------------------------------------------------------------------------------


def create_nodes(api: client.ApiClient, names: list[str], gpus: int = 8) -> None:
    """Every node as the GPU Operator's node reports itself, annotated for KWOK (a few creators at once)."""
    core: Any = client.CoreV1Api(api)  # dict bodies: the client serialises them as they are

    def create(name: str) -> None:
        body = gpu_node(name, gpus=gpus, heartbeat=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        status = body.pop("status")
        body["metadata"]["annotations"][KWOK_ANNOTATION] = "fake"
        core.create_node(body)
        keep = ("capacity", "allocatable", "addresses", "nodeInfo")
        core.patch_node_status(name, {"status": {key: status[key] for key in keep}})

    done = 0
    with ThreadPoolExecutor(max_workers=CREATORS, thread_name_prefix="bench-create") as pool:
        for _ in pool.map(create, names):
            done += 1
            if done % 500 == 0 or done == len(names):
                log.info("nodes_created", done=done, total=len(names))


def wait_nodes_ready(api: client.ApiClient, count: int, timeout_s: float) -> float:
    """Until ``count`` nodes are Ready without the lifecycle controller's taints; returns the seconds."""
    core: Any = client.CoreV1Api(api)
    started = time.monotonic()
    while True:
        ready = 0
        for node in core.list_node().items:
            conditions = {c.type: c.status for c in node.status.conditions or []}
            taints = [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
            ready += conditions.get("Ready") == "True" and not taints
        elapsed = time.monotonic() - started
        log.info("nodes_ready", ready=ready, total=count, elapsed_s=round(elapsed, 1))
        if ready >= count:
            return elapsed
        if elapsed > timeout_s:
            raise TimeoutError(f"only {ready} of {count} nodes Ready after {timeout_s:.0f} s")
        time.sleep(3.0)


def create_deployment(api: client.ApiClient, replicas: int) -> None:
    """A training Deployment: one pod per node taking its 8 GPUs, placed by kube-scheduler."""
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    labels = {APP_LABEL: DEPLOYMENT}
    container = {
        "name": "trainer",
        "image": "registry.invalid/train:1",
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
    }
    body = {
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                },
            },
        },
    }
    apps.create_namespaced_deployment(NAMESPACE, body)


# --- the outside watcher ------------------------------------------------------------------------------------


@dataclass
class PodSeen:
    node: str | None = None
    running_at: float | None = None
    gone_at: float | None = None
    created_after: float = 0.0  # perf_counter when the watcher first saw it


@dataclass
class FleetWatcher:
    """A watch of every node and of the benchmark's pods, as a scheduler or an operator's tool would hold;
    every transition is stamped with ``time.perf_counter()`` when it reaches this client."""

    api: client.ApiClient
    tainted: dict[str, bool] = field(default_factory=dict)
    taint_on: dict[str, list[float]] = field(default_factory=dict)
    cordoned: dict[str, bool] = field(default_factory=dict)
    cordon_on: dict[str, list[float]] = field(default_factory=dict)
    pods: dict[str, PodSeen] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    stopping: bool = False
    _watches: list[Any] = field(default_factory=list)

    def start(self) -> FleetWatcher:
        core = client.CoreV1Api(self.api)
        for target, name in ((self._follow_nodes, "nodes"), (self._follow_pods, "pods")):
            threading.Thread(target=self._run, args=(target, core), name=f"bench-{name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping = True
        for each in self._watches:
            each.stop()

    def _run(self, follow: Callable[[Any], None], core: client.CoreV1Api) -> None:
        while not self.stopping:
            try:
                follow(core)
            except (urllib3.exceptions.HTTPError, OSError, ApiException) as exc:
                if self.stopping:
                    return
                log.warning("watch_restarted", error=str(exc)[:200])
                time.sleep(0.5)

    def _stream(self, lister: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        listed = lister(**kwargs)
        yield from ({"type": "ADDED", "object": item} for item in listed.items)
        version = listed.metadata.resource_version
        while not self.stopping:
            each: Any = watch.Watch()
            self._watches.append(each)
            for event in each.stream(lister, resource_version=version, timeout_seconds=240, **kwargs):
                version = event["object"].metadata.resource_version
                yield event

    def _follow_nodes(self, core: client.CoreV1Api) -> None:
        for event in self._stream(core.list_node):
            now = time.perf_counter()
            node = event["object"]
            name = node.metadata.name
            tainted = any(t.key == TAINT_KEY for t in node.spec.taints or [])
            cordoned = bool(node.spec.unschedulable)
            with self.changed:
                if tainted and not self.tainted.get(name, False):
                    self.taint_on.setdefault(name, []).append(now)
                if cordoned and not self.cordoned.get(name, False):
                    self.cordon_on.setdefault(name, []).append(now)
                self.tainted[name], self.cordoned[name] = tainted, cordoned
                self.changed.notify_all()

    def _follow_pods(self, core: client.CoreV1Api) -> None:
        lister = core.list_namespaced_pod
        for event in self._stream(lister, namespace=NAMESPACE, label_selector=f"{APP_LABEL}={DEPLOYMENT}"):
            now = time.perf_counter()
            pod = event["object"]
            with self.changed:
                seen = self.pods.setdefault(pod.metadata.name, PodSeen(created_after=now))
                seen.node = pod.spec.node_name or seen.node
                terminating = pod.metadata.deletion_timestamp is not None
                if pod.status.phase == "Running" and not terminating and seen.running_at is None:
                    seen.running_at = now
                if (event["type"] == "DELETED" or terminating) and seen.gone_at is None:
                    seen.gone_at = now
                self.changed.notify_all()

    # --- questions ------------------------------------------------------------------------------------------

    def wait(self, predicate: Callable[[], Any], timeout_s: float) -> Any:
        """The predicate's first true value (checked under the lock on every change), or TimeoutError."""
        with self.changed:
            value = self.changed.wait_for(predicate, timeout_s)
        if not value:
            raise TimeoutError("the watched state never came")
        return value

    def tainted_since(self, name: str, since: float) -> float | None:
        return next((t for t in self.taint_on.get(name, []) if t >= since), None)

    def cordoned_since(self, name: str, since: float) -> float | None:
        return next((t for t in self.cordon_on.get(name, []) if t >= since), None)

    def all_gone(self, pods: list[str]) -> bool:
        return all(self.pods[p].gone_at for p in pods)

    def first_running_since(self, since: float) -> float | None:
        """When the first pod seen at or after ``since`` was Running (a replacement), or None."""
        times = [p.running_at for p in self.pods.values() if p.created_after >= since and p.running_at]
        return min(times, default=None)

    def running_on(self, node: str) -> list[str]:
        return [n for n, p in self.pods.items() if p.node == node and p.gone_at is None]

    def running_count(self) -> int:
        return sum(1 for p in self.pods.values() if p.running_at is not None and p.gone_at is None)


# --- the aggregator process ------------------------------------------------------------------------------


class AggregatorProcess(AggregatorChild):
    """The product's aggregator process (``sim/aggregator_child.py``) with the benchmark's admin token."""

    def __init__(self, workdir: Path, settings: dict[str, Any], admin_token: str) -> None:
        super().__init__(workdir, None, **settings)
        self.admin_token = admin_token

    def start(self) -> AggregatorProcess:
        super().start()
        return self

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"}
        url = f"{self.url}{path}"  # always http://127.0.0.1
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            text = answer.read().decode()
        return json.loads(text) if text.lstrip().startswith(("{", "[")) else text

    def report_histogram(self) -> dict[float, float]:
        """The report-duration histogram's cumulative buckets (upper bound in s -> count)."""
        text = self.request("GET", "/metrics")
        buckets: dict[float, float] = {}
        for line in str(text).splitlines():
            if line.startswith("gpuhealth_aggregator_report_duration_seconds_bucket"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
        return buckets


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The ``q`` quantile of the observations between two scrapes, interpolated within its bucket as
    Prometheus' ``histogram_quantile`` does; None without observations."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


# --- /proc ------------------------------------------------------------------------------------------------


def process_usage(pid: int) -> dict[str, float]:
    """Resident memory (MiB) and CPU seconds (user + system) of one process, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    with Path(f"/proc/{pid}/stat").open(encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / ticks
    rss_kib = 0
    with Path(f"/proc/{pid}/status").open(encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return {"rss_mib": round(rss_kib / 1024, 1), "cpu_s": round(cpu_s, 1)}


def child_pids(parent: int, marker: str) -> list[int]:
    """The processes whose parent is ``parent`` and whose command line holds ``marker`` (the agent hosts of
    this process: ``multiprocessing``'s ``spawn_main``)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and marker in cmdline:
                found.append(int(entry.name))
    return found


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
