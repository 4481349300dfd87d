"""False positives of the peer comparison on a healthy simulated fleet over a simulated day.

``python -m bench.peers [--quick] [--nodes N] [--steps S] [--json]`` builds ``N`` fake 8 x H100 nodes under a
noisy training load (``sim/fakes/load.py``: silicon and cooling spread, the job's intensity step by step,
a share of nodes idle between jobs with their PCIe links at Gen1, rare PCIe replays), reads every node
through the real NVML backend at each of ``S`` steps (96 = a day at the 15-minute cadence of a report
history), and runs the aggregator's comparison (``aggregator.peers.compare``) with the default settings on
each step (error rates from one step to the next, 15 simulated minutes apart). It counts every GPU flagged at
least once (the goal is zero) and, as a check that the same run can see a fault, injects the three slow-GPU
faults and a PCIe replay storm on four nodes in a second, short pass.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import compare
from aggregator.peers.fleet import peer_gpus
from aggregator.peers.rates import CounterRates
from core.logging import configure_logging
from sim.fakes.fleet import LoadedFleet

FULL_NODES, FULL_STEPS = 100, 96
START, STEP = datetime(2026, 1, 1, tzinfo=UTC), timedelta(minutes=15)
QUICK_NODES, QUICK_STEPS = 64, 12


def _pass(
    fleet: LoadedFleet, steps: int, settings: PeerSettings, *, storm: tuple[str, int] | None = None
) -> tuple[set[tuple[str, int, str]], float]:
    flagged: set[tuple[str, int, str]] = set()
    compare_s = 0.0
    rates = CounterRates(settings.rate_window_s)
    for step in range(steps):
        fleet.step(step)
        if storm is not None:
            fleet.nvml[storm[0]].add_pcie_replays(storm[1], 50)  # a replay storm: 200 an hour
        at = START + step * STEP
        gpus = [gpu for name, stored in fleet.stored() for gpu in peer_gpus(name, stored, at=at)]
        started = time.perf_counter()
        result = compare(rates.with_rates(gpus), settings)
        compare_s += time.perf_counter() - started
        flagged |= {(o.node, o.index, o.code) for o in result.outliers}
    return flagged, compare_s


def measure(nodes: int, steps: int) -> dict[str, Any]:
    settings = PeerSettings()
    cpu_started = time.process_time()
    started = time.perf_counter()
    healthy = LoadedFleet(nodes, seed="bench-day")
    flagged, compare_s = _pass(healthy, steps, settings)
    healthy.close()
    elapsed = time.perf_counter() - started
    faulty = LoadedFleet(nodes, seed="bench-faults")
    faulty.nvml[faulty.names[1]].train_down_link(2, gen=3)
    faulty.nvml[faulty.names[2]].throttle_silently(4, factor=0.6)
    faulty.nvml[faulty.names[3]].slow_at_full_power(6, factor=0.62)
    found, _ = _pass(faulty, 6, settings, storm=(faulty.names[4], 1))
    faulty.close()
    gpus = nodes * 8
    return {
        "benchmark": "peer_false_positives",
        "nodes": nodes,
        "gpus": gpus,
        "steps": steps,
        "gpu_readings_compared": gpus * steps,
        "flagged_gpus": len({(node, index) for node, index, _code in flagged}),
        "flagged": sorted(f"{node}/{index}/{code}" for node, index, code in flagged),
        "false_positive_rate": len(flagged) / gpus,
        "compare_ms_per_step": round(1000 * compare_s / steps, 2),
        "seconds": round(elapsed, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),  # both passes
        "faults_injected": 4,
        "faults_found": sorted(f"{node}/{index}/{code}" for node, index, code in found),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the result (one JSON object with --json)."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes, {QUICK_STEPS} steps")
    parser.add_argument("--nodes", type=int, default=None, help=f"fake nodes (default {FULL_NODES})")
    parser.add_argument("--steps", type=int, default=None, help=f"steps of the day (default {FULL_STEPS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("warning")
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    steps = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    if nodes < 10 or steps < 1:
        parser.error("--nodes must be at least 10 and --steps at least 1")
    result = measure(nodes, steps)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(
            f"{result['gpus']} healthy GPUs over {steps} steps: {result['flagged_gpus']} flagged "
            f"(rate {result['false_positive_rate']}); "
            f"comparison {result['compare_ms_per_step']} ms per step; "
            f"faults found: {result['faults_found']}\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
