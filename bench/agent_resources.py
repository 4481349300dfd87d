"""Resident memory and CPU of one agent at steady state: 8 fake GPUs, the default 10 s interval.

``python -m bench.agent_resources [--quick] [--seconds S] --json`` starts ``gpuhealth sim kube`` in another
process (so the API server's cost is not counted), then runs one agent in this process exactly as
``gpuhealth agent`` wires it (real loop, NVML backend, XID watcher thread, node watch, HTTP endpoint) on an
8 x H100 fake NVML with 8 fake InfiniBand ports (fabric readings and trends on every pass). After a
warm-up it samples the resident set size and measures the CPU time this process used over the window:
``cpu_percent`` is of one core. The fake NVML runs in-process, so its cost is counted as the agent's (on a
real node the driver's share is in the kernel).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.settings import AgentSettings, FabricSettings, HttpSettings, KubernetesSettings
from agent.wiring import build_agent
from core.logging import configure_logging
from sim.fakes.infiniband import FakeInfiniband
from sim.fakes.nvml import FakeNvml

FULL_SECONDS, QUICK_SECONDS = 300.0, 30.0
WARMUP_S = 12.0
SAMPLE_EVERY_S = 5.0
NODE = "gpu-node-0"
IB_PORTS = 8
TARGET_RSS_MIB, TARGET_CPU_PERCENT = 80.0, 1.0
MIB = 1024 * 1024


def rss_bytes() -> int:
    """This process's resident set size now (psutil when installed, else /proc/self/status VmRSS)."""
    try:
        import psutil  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc/self/status") from None
    return int(psutil.Process().memory_info().rss)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_emulator(kubeconfig: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """``gpuhealth sim kube`` with one GPU node, in its own process; returns once its kubeconfig exists."""
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuhealth.cli.main",
                "sim",
                "kube",
                "--nodes",
                "1",
                "--kubeconfig-out",
                str(kubeconfig),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"the emulator did not start: {log_path.read_text(errors='replace')}")
        time.sleep(0.1)
    return process


def run(seconds: float) -> dict[str, Any]:
    """Measure one agent for ``seconds`` after the warm-up."""
    with tempfile.TemporaryDirectory(prefix="gpuhealth-bench-") as workdir:
        root = Path(workdir)
        kubeconfig = root / "kubeconfig"
        emulator = start_emulator(kubeconfig, root / "sim.log")
        try:
            return _measure(root, kubeconfig, seconds)
        finally:
            emulator.terminate()
            emulator.wait(10)


def _measure(root: Path, kubeconfig: Path, seconds: float) -> dict[str, Any]:
    from agent.telemetry.http import AgentHttpServer

    rss_before = rss_bytes()
    infiniband = FakeInfiniband(root / "sysfs-infiniband", IB_PORTS)
    settings = AgentSettings(
        node_name=NODE,
        state_dir=root / "state",
        kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        http=HttpSettings(host="127.0.0.1", port=0),
        fabric=FabricSettings(sysfs_root=infiniband.root),
    )
    agent = build_agent(settings, library=FakeNvml("h100_sxm", 8, seed=1, node_name=NODE))
    server = AgentHttpServer(
        agent.metrics.registry, alive=lambda: agent.alive, ready=lambda: agent.ready
    ).start()
    agent.start()
    try:
        time.sleep(WARMUP_S)
        executor: Any = agent.parts.executor
        writes_before, ticks_before = executor.writes_total, agent.ticks
        cpu_start, wall_start = cpu_seconds(), time.monotonic()
        samples = [rss_bytes()]
        while time.monotonic() - wall_start < seconds:
            time.sleep(min(SAMPLE_EVERY_S, seconds - (time.monotonic() - wall_start)) or 0.0)
            samples.append(rss_bytes())
        cpu_used, wall = cpu_seconds() - cpu_start, time.monotonic() - wall_start
        ticks, writes = agent.ticks - ticks_before, executor.writes_total - writes_before
        state = agent.last.health.state.value if agent.last else None
    finally:
        agent.stop()
        server.stop()
    cpu_percent = 100.0 * cpu_used / wall
    rss_max = max(samples) / MIB
    return {
        "benchmark": "agent_resources",
        "gpus": 8,
        "ib_ports": IB_PORTS,
        "interval_s": settings.interval_s,
        "window_s": round(wall, 1),
        "ticks": ticks,
        "node_state": state,
        "rss_mib": round(samples[-1] / MIB, 1),
        "rss_max_mib": round(rss_max, 1),
        "rss_before_agent_mib": round(rss_before / MIB, 1),
        "cpu_percent": round(cpu_percent, 3),
        "api_writes_in_window": writes,
        "target_rss_mib": TARGET_RSS_MIB,
        "target_cpu_percent": TARGET_CPU_PERCENT,
        "meets_target": rss_max <= TARGET_RSS_MIB and cpu_percent <= TARGET_CPU_PERCENT,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.agent_resources", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"measure {QUICK_SECONDS:.0f} s instead of 5 minutes"
    )
    parser.add_argument("--seconds", type=float, help=f"measurement window (default {FULL_SECONDS:.0f})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("error", "json")
    seconds = args.seconds or (QUICK_SECONDS if args.quick else FULL_SECONDS)
    result = run(seconds)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"one agent, 8 GPUs, {result['window_s']} s: RSS {result['rss_max_mib']} MiB max, "
            f"CPU {result['cpu_percent']} % of one core "
            f"(targets {TARGET_RSS_MIB} MiB, {TARGET_CPU_PERCENT} %)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
