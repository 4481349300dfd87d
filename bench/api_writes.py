"""API writes per node-hour of healthy agents (target: zero).

``python -m bench.api_writes [--quick] [--nodes N] --json`` runs a fleet of healthy agents (the real loop,
8 fake GPUs each) against the emulated Kubernetes API with a fast interval, so that each agent makes the
360 passes of an hour at the default 10 s interval in a few seconds; then it scales the mutating requests
its executors sent to writes per node-hour. The first pass of each agent marks the node healthy (condition
and label: start-up, reported apart); the figure is what the agents write after that. The emulator's
resourceVersion of each node is compared too, so a write that bypassed the counter would still show.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bench.agent_fleet import FleetNode, agent_fleet
from core.logging import configure_logging
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim

FULL_NODES, QUICK_NODES = 20, 5
PASSES_PER_HOUR = 360  # one hour at the default 10 s interval
FAST_INTERVAL_S = 0.01
TARGET_WRITES_PER_NODE_HOUR = 0


def run(nodes: int, hours: float) -> dict[str, Any]:
    """Run ``nodes`` healthy agents for ``hours`` simulated hours each; count their writes."""
    passes = round(PASSES_PER_HOUR * hours)
    with KubeSim(controllers=False) as sim:
        names = build_fleet(sim.store, nodes)
        with agent_fleet(sim, names, interval_s=FAST_INTERVAL_S) as fleet:
            for node in fleet:
                node.agent.start()
            _wait_for_passes(fleet, 1)
            startup_writes = sum(node.executor.writes_total for node in fleet)
            versions = {name: _version(sim, name) for name in names}
            ticks_before = {node.name: node.agent.ticks for node in fleet}
            requests_before = sum(node.executor.requests_total for node in fleet)
            started = time.monotonic()
            _wait_for_passes(fleet, passes + 1)
            wall = time.monotonic() - started
            for node in fleet:
                node.agent.stop()
            writes = sum(node.executor.writes_total for node in fleet) - startup_writes
            requests = sum(node.executor.requests_total for node in fleet) - requests_before
            passes_done = sum(node.agent.ticks - ticks_before[node.name] for node in fleet)
            changed_nodes = [name for name in names if _version(sim, name) != versions[name]]
            errors = sum(node.agent.tick_errors for node in fleet)
    node_hours = passes_done / PASSES_PER_HOUR
    per_node_hour = writes / node_hours
    return {
        "benchmark": "api_writes",
        "agents": nodes,
        "simulated_node_hours": round(node_hours, 2),
        "passes": passes_done,
        "wall_s": round(wall, 1),
        "startup_writes_per_node": round(startup_writes / nodes, 2),
        "writes": writes,
        "writes_per_node_hour": round(per_node_hour, 3),
        "requests_per_node_hour": round(requests / node_hours, 3),
        "nodes_changed_on_server": len(changed_nodes),
        "tick_errors": errors,
        "target_writes_per_node_hour": TARGET_WRITES_PER_NODE_HOUR,
        "meets_target": writes == 0 and not changed_nodes,
    }


def _wait_for_passes(fleet: list[FleetNode], passes: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while any(node.agent.ticks < passes for node in fleet):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the agents did not make {passes} passes in {timeout:.0f} s")
        time.sleep(0.05)


def _version(sim: KubeSim, name: str) -> str:
    node = sim.store.get("nodes", None, name)
    return str(node["metadata"]["resourceVersion"]) if node is not None else ""


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(prog="python -m bench.api_writes", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} agents for one simulated hour")
    parser.add_argument("--nodes", type=int, help=f"agents (default {FULL_NODES})")
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours per agent (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("error", "json")
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    result = run(nodes, args.hours)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{nodes} healthy agents, {result['simulated_node_hours']} node-hours: "
            f"{result['writes_per_node_hour']} writes per node-hour (target {TARGET_WRITES_PER_NODE_HOUR})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
