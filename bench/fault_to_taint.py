"""Fault-to-taint latency: an XID injected in the fake NVML -> our taint visible through the API.

``python -m bench.fault_to_taint [--quick] [--nodes N] [--injections K] --json`` runs a fleet of agents in
one process (the real loop on its default 10 s interval) against the emulated Kubernetes API, and a
separate client that watches the nodes, as a scheduler would. Each injection picks a healthy node, injects
XID 79 on one GPU and times until the watcher sees ``gpuhealth.io/unhealthy`` on that node; then the fault
clears (the agent is woken for a clean reading, the incident closes, the taint goes) before the next one.
What is measured: NVML event thread -> loop wake-up -> snapshot -> checks -> state machine -> plan ->
PATCH -> API server -> watch event at another client. The interval plays no part: that is the point.

``--real-api`` runs the same fleet against a real kube-apiserver 1.37 with etcd and kube-controller-manager
(built by ``tools/build-control-plane.sh``; started and stopped by the tests' ``control_plane`` helper, the
nodes kept alive by their fake kubelets), so the emulator's figure has a real one beside it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch

from bench.agent_fleet import ApiServer, FleetNode, agent_fleet
from bench.fault_latency import latency_summary, run_cli, wait_until_watching
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim

TAINT_KEY = "gpuhealth.io/unhealthy"
WAIT_S = 15.0
ANCHOR = "NVSentinel's default polling: 15-45 s from fault to cordon (docs/benchmarks.md, Reference figures)"


class TaintWatcher:
    """A separate client's watch of every node: when did each node gain or lose our taint."""

    def __init__(self, sim: ApiServer) -> None:
        self._api_client: Any = sim.api_client()
        self._core = client.CoreV1Api(self._api_client)
        self._watch: Any = watch.Watch()  # type: ignore[no-untyped-call]
        self._tainted: dict[str, bool] = {}
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="bench-taint-watch", daemon=True)

    def start(self) -> TaintWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()
        self._api_client.close()

    def _run(self) -> None:
        try:
            self._follow()
        except (urllib3.exceptions.HTTPError, OSError):
            if not self._stopping:  # the stream ending at shutdown is expected; before it, it is a failure
                raise

    def _follow(self) -> None:
        for event in self._watch.stream(self._core.list_node, timeout_seconds=3600):
            node = event["object"]
            taints = node.spec.taints or []
            tainted = any(taint.key == TAINT_KEY for taint in taints)
            with self._changed:
                self._tainted[node.metadata.name] = tainted
                self._changed.notify_all()

    def wait_for(self, name: str, tainted: bool, timeout: float = WAIT_S) -> float:
        """The perf_counter time at which ``name``'s taint state was seen to be ``tainted``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._tainted.get(name) is tainted, timeout):
                raise TimeoutError(f"{name}: taint {'never appeared' if tainted else 'never went'}")
            return time.perf_counter()


def inject_once(node: FleetNode, watcher: TaintWatcher, gpu: int) -> float:
    """One XID 79 on a healthy node; returns seconds until the taint is seen; then clears it again."""
    started = time.perf_counter()
    if not node.nvml.inject_xid(gpu, 79):
        raise RuntimeError(f"{node.name}: the fake GPU refused the XID")
    seen = watcher.wait_for(node.name, tainted=True)
    node.agent.wake.set()  # a clean reading now: the incident closes (dwell 0) and the taint goes
    watcher.wait_for(node.name, tainted=False)
    return seen - started


@contextlib.contextmanager
def emulated(nodes: int) -> Iterator[tuple[ApiServer, list[str]]]:
    """The emulated API server, bare (no controllers), with ``nodes`` GPU nodes."""
    with KubeSim(controllers=False) as sim:
        yield sim, build_fleet(sim.store, nodes)


@contextlib.contextmanager
def real_control_plane(nodes: int) -> Iterator[tuple[ApiServer, list[str]]]:
    """etcd + kube-apiserver + kube-controller-manager on loopback, ``nodes`` GPU nodes (KWOK when built)."""
    support = Path(__file__).resolve().parent.parent / "tests" / "support"
    sys.path.insert(0, str(support))  # the tests' helpers: control_plane, fake_kubelet, realkube
    from control_plane import ControlPlane, find_binaries
    from realkube import Cluster

    with ControlPlane(find_binaries()) as plane:
        cluster = Cluster(plane, nodes=nodes, kwok=plane.kwok)  # KWOK nodes when built, else fake kubelets
        try:
            yield plane, cluster.node_names
        finally:
            cluster.close()


def measure(server: ApiServer, names: list[str], injections: int) -> tuple[list[float], int]:
    """Start an agent per node, wait until every one is watching, inject; the latencies and API writes."""
    watcher = TaintWatcher(server).start()
    try:
        with agent_fleet(server, names) as fleet:
            for node in fleet:
                node.agent.start()
            wait_until_watching(node.agent for node in fleet)
            latencies = [
                inject_once(fleet[i % len(fleet)], watcher, gpu=(i // len(fleet)) % 8)
                for i in range(injections)
            ]
            writes = sum(node.executor.writes_total for node in fleet)
    finally:
        watcher.stop()
    return latencies, writes


def run(nodes: int, injections: int) -> dict[str, Any]:
    """Against the emulated API: start the fleet, inject, and summarise the latencies."""
    with emulated(nodes) as (server, names):
        latencies, writes = measure(server, names, injections)
    return latency_summary("fault_to_taint", nodes, latencies, ANCHOR, api_writes=writes)


def run_real(nodes: int, injections: int) -> dict[str, Any]:
    """The same against a real kube-apiserver 1.37 (``--real-api``)."""
    with real_control_plane(nodes) as (server, names):
        latencies, writes = measure(server, names, injections)
    summary = latency_summary("fault_to_taint", nodes, latencies, ANCHOR, api_writes=writes)
    return {**summary, "api_server": "kube-apiserver v1.37.2 (etcd v3.7.3)"}


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    return run_cli("python -m bench.fault_to_taint", __doc__.splitlines()[0], run, argv, real_api=run_real)


if __name__ == "__main__":
    sys.exit(main())
