"""Fleet scale on a real control plane: one fault, a burst and drains at N KWOK GPU nodes.

``python -m bench.fleet_scale [--nodes N] [--quick] --json`` starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and KWOK (``tools/build-control-plane.sh``), N GPU nodes run by KWOK
(``nvidia.com/gpu: 8``, the GPU Operator's labels), a training Deployment whose pods kube-scheduler places one
per node (a few nodes left free for the replacements), an aggregator process (``python -m aggregator``,
SQLite, its central remediator on the real API server) and one real agent per node in host processes (each
agent its own watch of its own node, a 60 s polling interval: the faults measured are XIDs, which wake an
agent at once). An outside client watches every node and the pods. Then:

1. single: XID 79 on one node at a time (distinct nodes, spaced) on the quiet fleet; injection to the taint
   seen by the outside watch. Those nodes do not drain (their pods stay where the drains need room).
2. burst: a quarter of the fleet (1,000 nodes from 4,000 up) fails at once; each node's injection to taint,
   the breaker's trip time (polled at the aggregator) and how many of them were cordoned or lost a pod
   (must be none up to 5,000 nodes: a burst is a shared cause; above 5,000 the 1,000 nodes are less than
   the breaker's default 20 %, so it need not trip, and the fleet budget bounds what is drained).
3. drain: nodes failing one after another, drained by the central remediator while kube-scheduler places
   the replacement pods: cordon to drained and fault to the Deployment Running in full again.

Progress goes to stderr (structlog); one JSON object to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from agent.settings import AgentSettings, FabricSettings, HttpSettings
from agent.state.machine import DebounceConfig
from bench.agent_fleet import percentile
from bench.fleet_stack import (
    AggregatorProcess,
    FleetWatcher,
    RealKubeConnector,
    child_pids,
    create_deployment,
    create_nodes,
    histogram_quantile,
    import_control_plane,
    load_average,
    log,
    process_usage,
    wait_nodes_ready,
)
from core.logging import configure_logging
from remediation.plan.planner import RemediationPolicy
from sim.scenario.hosts import HostedFleet, HostedNode, host_count
from sim.scenario.identities import DemoIdentities
from sim.scenario.model import MAX_FLEET_NODES, AgentKnobs, Fleet, XidFault

FULL_NODES, QUICK_NODES = 1000, 200
FULL_INJECTIONS, QUICK_INJECTIONS = 200, 50
FULL_DRAINS, QUICK_DRAINS = 50, 10
BURST_MAX = 1000
BUDGET_NODES = 5  # the aggregator's default budget_max_nodes (its 10 % is more from 50 nodes up)
INTERVAL_S = 60.0
HEARTBEAT_S = 60.0
SPACING_S = 0.2
TAINT_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0
# A node of the drain phase must still be unhealthy when its first permit is asked again after the
# aggregator's settle wait (15 s by default): with no dwell its next clean pass would end the incident first.
DRAIN_DWELL_S = 30.0
# A burst node stays unhealthy past the settle wait and past the breaker's trip on a starved machine (39 s
# at 5,000 nodes on two cores): "no node drained" then proves the breaker, not a node that recovered first.
BURST_DWELL_S = 120.0
XID_79 = XidFault(xid=79)
GOALS = {
    "single_p99_s": 0.1,
    "burst_p99_s": 5.0,
    "cordon_to_drained_p50_s": 30.0,
    "aggregator_p99_ms": 50.0,
}
NVSENTINEL = {
    "time_to_cordon_50k_nodes": "P50 26 ms, P99 165 ms",
    "burst_1000_nodes": "P50 28 s, P99 42.7 s",
    "cordon_to_drained": "215-270 s at P50",
    "control_plane_memory_100k_nodes": "about 235 GB",
}


@dataclass(frozen=True)
class Plan:
    nodes: int
    injections: int
    burst: int
    drains: int

    @property
    def spare(self) -> int:
        """Nodes left without a pod, where the drained nodes' replacements go."""
        return self.drains + 10

    @classmethod
    def of(cls, nodes: int, injections: int, drains: int) -> Plan:
        if nodes > MAX_FLEET_NODES:
            # Checked before the control plane starts: the fleet's model refuses it only at the agents' start,
            # half an hour into a 10,000-node start-up.
            raise ValueError(f"at most {MAX_FLEET_NODES} nodes, not {nodes}")
        burst = BURST_MAX if nodes >= 4 * BURST_MAX else nodes // 4
        plan = cls(nodes, injections, burst, drains)
        if injections + burst + drains + plan.spare > nodes:
            raise ValueError(f"{nodes} nodes are too few for {injections} single faults, {drains} drains")
        return plan


def summary(latencies: list[float]) -> dict[str, Any]:
    if not latencies:
        return {"samples": 0, "p50_s": None, "p99_s": None, "max_s": None}
    return {
        "samples": len(latencies),
        "p50_s": round(statistics.median(latencies), 4),
        "p99_s": round(percentile(latencies, 0.99), 4),
        "max_s": round(max(latencies), 4),
    }


def agent_settings(
    name: str, root: Path, url: str, token_file: Path, *, drain: bool, dwell_s: float
) -> AgentSettings:
    """One node's agent: the long polling interval, its own aggregator token, drains by the remediator."""
    return AgentSettings(
        node_name=name,
        state_dir=root / "agents" / name,
        interval_s=INTERVAL_S,
        expected_gpu_count=8,
        debounce=DebounceConfig(min_dwell_s=dwell_s, clean_readings_to_recover=1),
        policy=RemediationPolicy(drain=drain),
        drain_by="aggregator",
        aggregator={"url": url, "token_file": token_file, "heartbeat_s": HEARTBEAT_S, "timeout_s": 5.0},
        http=HttpSettings(enabled=False),
        fabric=FabricSettings(sysfs_root=root / "agents" / name / "sysfs-infiniband"),
        log_level="error",
    )


class Stack:
    """Everything the phases need, made by :func:`stack`."""

    def __init__(self, plane: Any, aggregator: AggregatorProcess, fleet: HostedFleet, watcher: FleetWatcher):
        self.plane = plane
        self.aggregator = aggregator
        self.fleet = fleet
        self.watcher = watcher

    def wait_for_budget(self, timeout_s: float) -> None:
        """Until fewer than the default budget's nodes hold a permit."""
        deadline = time.monotonic() + timeout_s
        while len(self.aggregator.request("GET", "/v1/permits")) >= BUDGET_NODES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the permits were not returned within {timeout_s:.0f} s")
            time.sleep(0.5)

    def reset_breaker(self, reason: str) -> None:
        self.aggregator.request("POST", "/v1/breaker/reset", {"reason": reason})


@contextlib.contextmanager
def stack(plan: Plan, workdir: Path, figures: dict[str, Any]) -> Iterator[tuple[Stack, dict[str, list[str]]]]:
    control_plane = import_control_plane()
    started = time.monotonic()
    with control_plane.ControlPlane(control_plane.find_binaries()) as plane:
        if not (plane.kwok and plane.scheduler):
            raise control_plane.ControlPlaneUnavailable("KWOK and kube-scheduler are needed")
        log.info("control_plane_up", elapsed_s=round(time.monotonic() - started, 1))
        admin = plane.api_client()
        names = [f"gpu-node-{i:05d}" for i in range(plan.nodes)]
        create_nodes(admin, names)
        figures["nodes_ready_s"] = round(wait_nodes_ready(admin, plan.nodes, 60 + plan.nodes * 0.2), 1)
        watcher = FleetWatcher(plane.api_client()).start()
        replicas = plan.nodes - plan.spare
        create_deployment(admin, replicas)
        placed = time.monotonic()
        while watcher.running_count() < replicas:
            if time.monotonic() - placed > 120 + plan.nodes * 0.2:
                raise TimeoutError(f"only {watcher.running_count()} of {replicas} pods Running")
            log.info("pods_running", running=watcher.running_count(), replicas=replicas)
            time.sleep(5.0)
        figures["pods_running_s"] = round(time.monotonic() - placed, 1)
        figures["pods"] = replicas
        log.info("pods_placed", replicas=replicas, elapsed_s=figures["pods_running_s"])
        with watcher.changed:
            busy = sorted({p.node for p in watcher.pods.values() if p.node and p.gone_at is None})
        sets = {
            "single": busy[: plan.injections],
            "burst": busy[plan.injections : plan.injections + plan.burst],
            "drain": busy[plan.injections + plan.burst : plan.injections + plan.burst + plan.drains],
        }
        identities = DemoIdentities.fresh(names)
        aggregator = start_aggregator(plane, workdir, identities)
        try:
            agents_started = time.monotonic()
            fleet = start_agents(plane, plan, workdir, aggregator, identities, sets)
            figures["agents_ready_s"] = round(time.monotonic() - agents_started, 1)
            figures["agent_hosts"] = host_count(plan.nodes)
            try:
                yield Stack(plane, aggregator, fleet, watcher), sets
            finally:
                figures.update(resources(plane, aggregator, plan))
                fleet.stop()
        finally:
            watcher.stop()
            aggregator.stop()
            admin.close()


def start_aggregator(plane: Any, workdir: Path, identities: DemoIdentities) -> AggregatorProcess:
    """The aggregator process with the product's defaults (budget, breaker), every agent's own token and
    its central remediator on the real API server (the admin's kubeconfig)."""
    kubeconfig = plane.write_kubeconfig(workdir / "remediator.kubeconfig")
    settings = {
        "sqlite_synchronous": "NORMAL",
        "token_file": str(identities.write_token_file(workdir / "tokens.json")),
        "report_interval_s": HEARTBEAT_S,
        "remediator": {"orchestrator": "kubernetes", "kubeconfig": str(kubeconfig), "name": "bench"},
    }
    return AggregatorProcess(workdir, settings, identities.admin_token).start()


def start_agents(  # noqa: PLR0917 - the parts of the stack made before the agents
    plane: Any,
    plan: Plan,
    workdir: Path,
    aggregator: AggregatorProcess,
    identities: DemoIdentities,
    sets: dict[str, list[str]],
) -> HostedFleet:
    """One agent per node in host processes. The single-fault nodes do not drain (their pods stay where
    the drains need room); every faulted node recovers at its next clean pass (dwell 0; a drained node after
    ``DRAIN_DWELL_S``, a burst node after ``BURST_DWELL_S``), which ends its incident and returns its permit
    to the budget."""
    tokens = identities.write_agent_tokens(workdir / "tokens")
    single = set(sets["single"])
    names = sorted(tokens)
    hosted = [
        HostedNode(
            name,
            index,
            agent_settings(
                name,
                workdir,
                aggregator.url,
                tokens[name],
                drain=name not in single,
                dwell_s=_dwell_s(name, sets),
            ),
        )
        for index, name in enumerate(names)
    ]
    fleet_model = Fleet(nodes=plan.nodes, agent=AgentKnobs(interval_s=INTERVAL_S, heartbeat_s=HEARTBEAT_S))
    connector = RealKubeConnector(plane.url, plane.admin_token, str(plane.ca_file))
    last = [0.0]

    def progress(what: str, done: int, total: int) -> None:
        if time.monotonic() - last[0] > 10 or done == total:
            last[0] = time.monotonic()
            log.info("agents_" + what, done=done, total=total)

    return HostedFleet.start(
        fleet_model, hosted, connector, ready_timeout_s=300 + plan.nodes * 0.3, progress=progress
    )


def resources(plane: Any, aggregator: AggregatorProcess, plan: Plan) -> dict[str, Any]:
    """Memory and CPU of every process of the stack, at the end of the run."""
    usage: dict[str, Any] = {p.name: process_usage(p.popen.pid) for p in plane.processes}
    if aggregator.pid is not None:
        usage["aggregator"] = process_usage(aggregator.pid)
    hosts = [process_usage(pid) for pid in child_pids(os.getpid(), "spawn_main")]
    per_host = plan.nodes / max(1, len(hosts))
    host_rss = sum(h["rss_mib"] for h in hosts)
    return {
        "apiserver_rss_mib": usage["kube-apiserver"]["rss_mib"],
        "apiserver_cpu_s": usage["kube-apiserver"]["cpu_s"],
        "etcd_rss_mib": usage["etcd"]["rss_mib"],
        "etcd_cpu_s": usage["etcd"]["cpu_s"],
        "processes": usage,
        "agents": {
            "hosts": len(hosts),
            "per_host": round(per_host),
            "hosts_rss_mib": round(host_rss, 1),
            "hosts_cpu_s": round(sum(h["cpu_s"] for h in hosts), 1),
            "rss_per_agent_mib": round(host_rss / plan.nodes, 2),
        },
    }


def inject(stack: Stack, names: list[str]) -> float:
    started = time.perf_counter()
    stack.fleet.apply_fault(names, 0, XID_79)
    return started


def single_phase(stack: Stack, names: list[str]) -> dict[str, Any]:
    log.info("single_started", injections=len(names))
    latencies: list[float] = []
    missed = 0
    for done, name in enumerate(names, start=1):
        started = inject(stack, [name])
        try:
            seen = stack.watcher.wait(partial(stack.watcher.tainted_since, name, started), TAINT_TIMEOUT_S)
            latencies.append(seen - started)
        except TimeoutError:
            missed += 1
        if done % 50 == 0:
            log.info("single_progress", done=done, total=len(names), p50_s=summary(latencies)["p50_s"])
        time.sleep(SPACING_S)
    return {"injections": len(names), "missed": missed, **summary(latencies), "spacing_s": SPACING_S}


def burst_phase(stack: Stack, names: list[str]) -> dict[str, Any]:
    stack.reset_breaker("fleet-scale benchmark: before the burst")
    time.sleep(2.0)
    log.info("burst_started", nodes=len(names))
    trip: list[float] = []
    stop = threading.Event()

    def poll_breaker(started: float) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                if stack.aggregator.request("GET", "/v1/breaker").get("state") == "tripped":
                    trip.append(time.perf_counter() - started)
                    return
            time.sleep(0.1)

    started = time.perf_counter()
    poller = threading.Thread(target=poll_breaker, args=(started,), daemon=True)
    poller.start()
    stack.fleet.apply_fault(names, 0, XID_79)
    injected_s = time.perf_counter() - started
    deadline = started + TAINT_TIMEOUT_S * 2
    with contextlib.suppress(TimeoutError):
        stack.watcher.wait(
            lambda: all(stack.watcher.tainted_since(n, started) for n in names),
            max(1.0, deadline - time.perf_counter()),
        )
    with stack.watcher.changed:  # the window ends here: a taint seen after it is a late one
        window_end = time.perf_counter()
        latencies = [t - started for n in names if (t := stack.watcher.tainted_since(n, started)) is not None]
    poller.join(30.0)
    stop.set()
    time.sleep(15.0)  # time for any permit granted in the burst to turn into a cordon and evictions
    with stack.watcher.changed:
        cordoned = [n for n in names if stack.watcher.cordoned_since(n, started) is not None]
        evicted = {
            p.node
            for p in stack.watcher.pods.values()
            if p.node in set(names) and p.gone_at and p.gone_at >= started
        }
    drained = sorted(set(cordoned) | evicted)
    log.info(
        "burst_done", tainted=len(latencies), breaker_trip_s=trip[0] if trip else None, drained=len(drained)
    )
    # The burst nodes recover at their first pass after their dwell; wait for that before the drains.
    with contextlib.suppress(TimeoutError):
        stack.watcher.wait(
            lambda: not any(stack.watcher.tainted.get(n) for n in names), BURST_DWELL_S + INTERVAL_S * 2.5
        )
    with stack.watcher.changed:
        late = missed_taints(names, partial(stack.watcher.tainted_since, since=started), started, window_end)
    return {
        "nodes": len(names),
        "injected_within_s": round(injected_s, 3),
        "tainted": len(latencies),
        **summary(latencies),
        "breaker_trip_s": round(trip[0], 3) if trip else None,
        "drained_nodes": len(drained),
        **late.figures(stack.fleet.host_of),
    }


@dataclass(frozen=True)
class MissedTaints:
    """The burst nodes not seen tainted within the window, and when (if at all) their taint came later."""

    missed: list[str]
    late_s: dict[str, float]

    def figures(self, host_of: Callable[[str], int]) -> dict[str, Any]:
        """How many missed the window, how many were tainted later and the latest, and the missed per agent
        host (a host that stalled shows as one host's share of the burst)."""
        by_host = Counter(host_of(name) for name in self.missed)
        return {
            "missed_window": len(self.missed),
            "tainted_late": len(self.late_s),
            "late_max_s": round(max(self.late_s.values()), 3) if self.late_s else None,
            "missed_by_host": {str(host): count for host, count in sorted(by_host.items())},
        }


def missed_taints(
    names: list[str], tainted_since: Callable[[str], float | None], started: float, window_end: float
) -> MissedTaints:
    """Which of ``names`` had no taint by ``window_end``, and, for each of them tainted after it, how long
    after ``started`` (the watch keeps every taint's time, so a late one is still seen)."""
    missed: list[str] = []
    late_s: dict[str, float] = {}
    for name in names:
        seen = tainted_since(name)
        if seen is not None and seen <= window_end:
            continue
        missed.append(name)
        if seen is not None:
            late_s[name] = seen - started
    return MissedTaints(missed, late_s)


def _dwell_s(name: str, sets: dict[str, list[str]]) -> float:
    if name in sets["drain"]:
        return DRAIN_DWELL_S
    if name in sets["burst"]:
        return BURST_DWELL_S
    return 0.0 if name in sets["single"] else 600.0


def drain_phase(stack: Stack, names: list[str]) -> dict[str, Any]:
    stack.reset_breaker("fleet-scale benchmark: before the drains")
    time.sleep(2.0)
    log.info("drain_started", nodes=len(names))
    watcher = stack.watcher
    to_drained: list[float] = []
    to_running: list[float] = []
    failed: list[str] = []
    for done, name in enumerate(names, start=1):
        # Within the fleet budget: a node fails only while a permit is free (each drained node returns its
        # permit when its incident ends, at its next clean pass, within the polling interval).
        stack.wait_for_budget(INTERVAL_S * 5)
        with watcher.changed:
            pods = watcher.running_on(name)
        started = inject(stack, [name])
        try:
            cordon = watcher.wait(partial(watcher.cordoned_since, name, started), DRAIN_TIMEOUT_S)
            watcher.wait(partial(watcher.all_gone, pods), DRAIN_TIMEOUT_S)
            drained = max(watcher.pods[p].gone_at or 0.0 for p in pods) if pods else cordon
            running = watcher.wait(
                partial(watcher.first_running_since, started),
                DRAIN_TIMEOUT_S,
            )
        except TimeoutError:
            failed.append(name)
            log.warning("drain_timed_out", node=name)
            continue
        to_drained.append(max(0.0, drained - cordon))
        to_running.append(running - started)
        log.info("drain_progress", done=done, total=len(names), cordon_to_drained_s=round(to_drained[-1], 3))
    drained_summary = summary(to_drained)
    running_summary = summary(to_running)
    return {
        "nodes": len(names),
        "completed": len(to_drained),
        "timed_out": failed,
        "cordon_to_drained_p50_s": drained_summary["p50_s"],
        "cordon_to_drained_p99_s": drained_summary["p99_s"],
        "cordon_to_drained_max_s": drained_summary["max_s"],
        "fault_to_running_p50_s": running_summary["p50_s"],
        "fault_to_running_p99_s": running_summary["p99_s"],
        "fault_to_running_max_s": running_summary["max_s"],
    }


def report_p99(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """The aggregator's reports between two scrapes of its histogram, and their p99 in ms."""
    p99 = histogram_quantile(before, after, 0.99)
    reports = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    return {"reports": int(reports), "p99_ms": round(p99 * 1000, 1) if p99 is not None else None}


def run(plan: Plan, *, skip_drain: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = {"nodes": plan.nodes, "load_average_start": load_average()}
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="gpuhealth-fleet-scale-") as tmp,
        stack(plan, Path(tmp), figures) as (
            running,
            sets,
        ),
    ):
        scrapes = [running.aggregator.report_histogram()]
        figures["single"] = single_phase(running, sets["single"])
        log.info("phase_figures", phase="single", figures=figures["single"])  # kept if a later phase fails
        scrapes.append(running.aggregator.report_histogram())
        figures["burst"] = burst_phase(running, sets["burst"])
        log.info("phase_figures", phase="burst", figures=figures["burst"])
        scrapes.append(running.aggregator.report_histogram())
        if skip_drain:
            figures["drain"] = {
                "cordon_to_drained_p50_s": None,
                "fault_to_running_p50_s": None,
                "reason": "left out (--no-drain)",
            }
        else:
            figures["drain"] = drain_phase(running, sets["drain"])
            log.info("phase_figures", phase="drain", figures=figures["drain"])
        scrapes.append(running.aggregator.report_histogram())
        figures["aggregator"] = {
            **report_p99(scrapes[0], scrapes[-1]),
            "by_phase": {
                phase: report_p99(scrapes[i], scrapes[i + 1])
                for i, phase in enumerate(("single", "burst", "drain"))
            },
            "p99_source": "report-duration histogram between scrapes, interpolated in its bucket",
        }
        figures["load_average_end"] = load_average()
    figures["wall_s"] = round(time.monotonic() - started, 1)
    figures["agents_per_host"] = figures.get("agents", {}).get("per_host")
    figures["goals"] = GOALS
    figures["nvsentinel"] = NVSENTINEL
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, help=f"GPU nodes (default {FULL_NODES}; --quick {QUICK_NODES})")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_NODES} nodes, {QUICK_INJECTIONS} faults"
    )
    parser.add_argument("--injections", type=int, help=f"single faults (default {FULL_INJECTIONS})")
    parser.add_argument("--drains", type=int, help=f"nodes drained one after another (default {FULL_DRAINS})")
    parser.add_argument("--no-drain", action="store_true", help="leave the drain phase out")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    injections = args.injections or (QUICK_INJECTIONS if args.quick else FULL_INJECTIONS)
    drains = args.drains or (QUICK_DRAINS if args.quick else FULL_DRAINS)
    try:
        plan = Plan.of(nodes, injections, drains)
    except ValueError as exc:
        print(f"fleet_scale: error: {exc}", file=sys.stderr)
        return 2
    configure_logging("info", "json")
    # A stopped benchmark (timeout, Ctrl-C from a supervisor) still stops the control plane it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    result = run(plan, skip_drain=args.no_drain)
    if args.json:
        print(json.dumps(result))
    else:
        single, burst = result["single"], result["burst"]
        print(
            f"{nodes} nodes: single p50 {single['p50_s']} s p99 {single['p99_s']} s; "
            f"burst of {burst['nodes']} p99 {burst['p99_s']} s, breaker {burst['breaker_trip_s']} s, "
            f"drained {burst['drained_nodes']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
