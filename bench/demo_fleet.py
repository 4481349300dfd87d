"""The whole demo on a large fleet: ``gpuhealth demo --headless --json`` timed from outside.

``python -m bench.demo_fleet [--quick] [--nodes N] --json`` runs the shipped default scenario in a child
process (aggregator, emulated Kubernetes API, one real agent per node on fake GPUs, the timeline of faults)
and records its wall time, the child's peak resident memory, the demo's own start-up and timeline seconds,
the time scale it played at, the fault-to-taint latencies and whether every expectation held. Default
1000 nodes; ``--quick`` 200.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

NODES = 1000
QUICK_NODES = 200
TIMEOUT_S = 1800.0
ANCHOR = "NVSentinel handles about 2.5 nodes/s, one node at a time (docs/benchmarks.md, Reference figures)."


class DemoFailedToRun(RuntimeError):
    """The demo printed no summary (it could not start, or it was killed)."""


def run(nodes: int) -> dict[str, Any]:
    """Play the default scenario on ``nodes`` nodes in a child process and summarise what it reported."""
    command = [
        sys.executable,
        "-m",
        "gpuhealth.cli.main",
        "demo",
        "--nodes",
        str(nodes),
        "--headless",
        "--json",
    ]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    wall_s = time.perf_counter() - started
    # ru_maxrss is the largest child waited for, in KiB on Linux: here the only child is the demo.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = result.stdout.strip().splitlines()
    if not lines:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise DemoFailedToRun(f"the demo exited {result.returncode} without a summary: {last}")
    summary: dict[str, Any] = json.loads(result.stdout)
    return figures(summary, nodes, wall_s, peak_kib, result.returncode)


def figures(
    summary: dict[str, Any], nodes: int, wall_s: float, peak_kib: int, exit_code: int
) -> dict[str, Any]:
    """The benchmark's figures from the demo's JSON summary."""
    durations = summary["durations"]
    latency = summary["fault_to_taint_summary"]
    failed = [e["name"] for e in summary["expectations"] if not e["passed"]]
    tainted = latency["samples"]
    return {
        "nodes": nodes,
        "passed": bool(summary["passed"]) and exit_code == 0,
        "exit_code": exit_code,
        "failed_expectations": failed,
        "time_scale": summary.get("time_scale", 1.0),
        "wall_s": round(wall_s, 1),
        "startup_s": durations["startup_s"],
        "timeline_s": durations["timeline_s"],
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "fault_to_taint": {
            "samples": tainted,
            "p50_s": latency["p50_s"],
            "p99_s": latency["p99_s"],
            "max_s": latency["max_s"],
        },
        "anchor": ANCHOR,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(prog="python -m bench.demo_fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes instead of {NODES}")
    parser.add_argument("--nodes", type=int, default=None, help="fleet size (overrides --quick)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    nodes = args.nodes or (QUICK_NODES if args.quick else NODES)
    if nodes < 1:
        print("python -m bench.demo_fleet: --nodes needs at least 1", file=sys.stderr)
        return 2
    try:
        result = run(nodes)
    except (DemoFailedToRun, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
        print(f"python -m bench.demo_fleet: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        latency = result["fault_to_taint"]
        status = "passed" if result["passed"] else f"FAILED {result['failed_expectations']}"
        print(
            f"{nodes} nodes: {status}; wall {result['wall_s']} s (start-up {result['startup_s']} s, timeline "
            f"{result['timeline_s']} s at x{result['time_scale']}), peak RSS {result['peak_rss_mib']} MiB, "
            f"fault-to-taint p50 {latency['p50_s']} s / p99 {latency['p99_s']} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
