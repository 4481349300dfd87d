"""What the fault-to-reaction benchmarks share: readiness wait, latency summary and the command line.

``fault_to_taint`` (Kubernetes) and ``fault_to_ineligible`` (Nomad) measure the same path against a
different orchestrator; only the fleet, the watcher and the write count differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.loop import Agent
from bench.agent_fleet import percentile
from core.logging import configure_logging

FULL_NODES, QUICK_NODES = 50, 10
FULL_INJECTIONS, QUICK_INJECTIONS = 200, 30
TARGET_P99_S = 1.0
READY_TIMEOUT_S = 60.0


def wait_until_watching(agents: Iterable[Agent], timeout: float = READY_TIMEOUT_S) -> None:
    """Block until every agent is ready and its NVML event feed is watching (injections before are lost)."""
    deadline = time.monotonic() + timeout
    for agent in agents:
        feed = agent.parts.feed
        while not (agent.ready and feed is not None and feed.watching):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{agent.node}: the agent never became ready")
            time.sleep(0.05)


def latency_summary(
    benchmark: str, agents: int, latencies: list[float], anchor: str, **writes: float
) -> dict[str, Any]:
    """The result object: quantiles of ``latencies`` against the p99 target; ``writes`` go after the mean."""
    p99 = percentile(latencies, 0.99)
    return {
        "benchmark": benchmark,
        "agents": agents,
        "injections": len(latencies),
        "p50_s": round(statistics.median(latencies), 4),
        "p99_s": round(p99, 4),
        "max_s": round(max(latencies), 4),
        "mean_s": round(statistics.fmean(latencies), 4),
        **writes,
        "interval_s": 10.0,
        "target_p99_s": TARGET_P99_S,
        "meets_target": p99 <= TARGET_P99_S,
        "anchor": anchor,
    }


def run_cli(
    prog: str,
    description: str,
    run: Callable[[int, int], dict[str, Any]],
    argv: list[str] | None,
    *,
    real_api: Callable[[int, int], dict[str, Any]] | None = None,
) -> int:
    """Parse the shared flags, ``run(nodes, injections)`` (or ``real_api(...)`` with ``--real-api``), print
    one JSON object or a short summary."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if real_api is not None:
        parser.add_argument(
            "--real-api",
            action="store_true",
            help="against a real kube-apiserver (tools/build-control-plane.sh) instead of the emulator",
        )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_NODES} agents, {QUICK_INJECTIONS} injections"
    )
    parser.add_argument("--nodes", type=int, help=f"agents in the fleet (default {FULL_NODES})")
    parser.add_argument("--injections", type=int, help=f"XIDs injected (default {FULL_INJECTIONS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("error", "json")
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    injections = args.injections or (QUICK_INJECTIONS if args.quick else FULL_INJECTIONS)
    chosen = real_api if real_api is not None and getattr(args, "real_api", False) else run
    result = chosen(nodes, injections)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{injections} XIDs on {nodes} agents: p50 {result['p50_s']} s, p99 {result['p99_s']} s, "
            f"max {result['max_s']} s (target p99 <= {TARGET_P99_S} s)"
        )
    return 0
