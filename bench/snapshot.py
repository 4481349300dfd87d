"""How long ``NvmlBackend.snapshot()`` takes for an 8-GPU H100 node, through the fake NVML, and with fabric.

``python -m bench.snapshot [--quick] [--json]`` prints the median, p99 and max over N snapshots. The
``with_fabric`` case adds what the agent adds on a node with 8 InfiniBand ports: the ports read from a
(fake, on-disk) sysfs tree, the fabric check and the trends with their memory. The fake
answers in microseconds, so this measures gpuhealth's own overhead (about 900 NVML calls turned into one
v1 snapshot); on hardware each NVML call costs more (the driver round trip), see the ``note`` field.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agent.backends.nvml.backend import NvmlBackend
from agent.sources.fabric import FabricSource, FabricTrends
from checks.config import ChecksConfig
from checks.fabric import check_fabric
from core.logging import configure_logging
from sim.fakes.infiniband import FakeInfiniband
from sim.fakes.nvml import FakeNvml

FULL_RUNS = 2000
QUICK_RUNS = 200
IB_PORTS = 8
FABRIC_TARGET_MS = 10.0
WARMUP_RUNS = 20
NOTE = (
    "measured against the in-process fake NVML, so this is gpuhealth's own overhead per snapshot; "
    "real NVML calls on hardware cost more (each is a driver round trip), run "
    "'python -m agent.backends.nvml.seam --probe' and 'gpuhealth snapshot' on a GPU node for those"
)


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, round(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def measure(runs: int, profile: str = "h100_sxm", gpu_count: int = 8) -> dict[str, object]:
    """Time ``runs`` snapshots of one fake node (after a short warm-up) and summarise them in ms."""
    fake = FakeNvml(profile, gpu_count, seed="bench", node_name="bench-node")
    durations: list[float] = []
    with NvmlBackend(fake, node_name="bench-node", expected_gpu_count=gpu_count) as backend:
        for _ in range(WARMUP_RUNS):
            backend.snapshot()
        calls_before = sum(fake.calls.values())
        for _ in range(runs):
            began = time.perf_counter()
            backend.snapshot()
            durations.append(time.perf_counter() - began)
        calls_per_snapshot = (sum(fake.calls.values()) - calls_before) / runs
    durations.sort()
    return {
        "benchmark": "nvml_snapshot",
        "profile": profile,
        "gpus": gpu_count,
        "runs": runs,
        "median_ms": round(statistics.median(durations) * 1000, 3),
        "p99_ms": round(_percentile(durations, 0.99) * 1000, 3),
        "max_ms": round(durations[-1] * 1000, 3),
        "nvml_calls_per_snapshot": round(calls_per_snapshot),
        "note": NOTE,
    }


def measure_fabric(runs: int, gpu_count: int = 8, ib_ports: int = IB_PORTS) -> dict[str, object]:
    """Time ``runs`` snapshots with fabric readings, plus the fabric check and trends on each, in ms."""
    fake = FakeNvml("h100_sxm", gpu_count, seed="bench", node_name="bench-node")
    checks = ChecksConfig()
    trends = FabricTrends(checks)
    durations: list[float] = []
    cpu: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="gpuhealth-bench-ib-") as workdir,
        NvmlBackend(fake, node_name="bench-node", expected_gpu_count=gpu_count) as backend,
    ):
        infiniband = FakeInfiniband(Path(workdir), ib_ports)
        source = FabricSource(backend, sysfs_root=infiniband.root)
        for _ in range(WARMUP_RUNS):
            trends.findings(source.snapshot())
        for _ in range(runs):
            began, began_cpu = time.perf_counter(), time.thread_time()
            snapshot = source.snapshot()
            check_fabric(snapshot, checks)
            trends.findings(snapshot)
            cpu.append(time.thread_time() - began_cpu)
            durations.append(time.perf_counter() - began)
    durations.sort()
    cpu.sort()
    cpu_p99_ms = _percentile(cpu, 0.99) * 1000
    return {
        "ib_ports": ib_ports,
        "median_ms": round(statistics.median(durations) * 1000, 3),
        "p99_ms": round(_percentile(durations, 0.99) * 1000, 3),
        "max_ms": round(durations[-1] * 1000, 3),
        # CPU time of this thread (user + system, the sysfs reads included): our own overhead, without the
        # time other processes on a shared machine took the core away (which wall-clock p99 shows).
        "cpu_median_ms": round(statistics.median(cpu) * 1000, 3),
        "cpu_p99_ms": round(cpu_p99_ms, 3),
        "target_ms": FABRIC_TARGET_MS,
        "meets_target": cpu_p99_ms <= FABRIC_TARGET_MS,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the result (one JSON object with --json)."""
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs instead of {FULL_RUNS}")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("warning")  # logs to stderr: stdout carries only the result
    runs = QUICK_RUNS if args.quick else FULL_RUNS
    result = {**measure(runs), "with_fabric": measure_fabric(runs)}
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(
            f"snapshot() of an {result['gpus']}-GPU fake {result['profile']} node, {result['runs']} runs: "
            f"median {result['median_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms "
            f"({result['nvml_calls_per_snapshot']} NVML calls each)\n"
            f"with fabric ({IB_PORTS} IB ports, fabric check and trends): {result['with_fabric']}\n"
            f"note: {NOTE}\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
