"""Aggregator throughput: sustained report ingest and fleet-summary latency, on SQLite and PostgreSQL.

``python -m bench.aggregator [--quick] [--json]`` starts a real aggregator process (``python -m aggregator``)
per database, registers N simulated 8-GPU nodes (one report each), then sends a second full round of
reports (the steady state: every node updating its row) with ``--concurrency`` requests in flight, then a
third round paced at the rate a 10,000-node fleet reporting every 30 s really sends (``at_fleet_rate``),
times ``GET /v1/fleet`` at N nodes, and last has every agent restart at once (``reregister_burst``: N
connections opened together, each sending a report of a new epoch; any answer that is not 2xx/4xx, or a
dropped connection, is a server error). The load generator runs on the same machine (a minimal HTTP client, so
that it costs little CPU); ``server_cpu_ms_per_report`` is the aggregator process's own CPU time per report,
and ``store_only`` the ingest rate of the store itself, without HTTP.
PostgreSQL needs ``--postgres-url`` or the server binaries in /usr/lib/postgresql/15/bin (a throw-away
server is started). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from aggregator.ingest import ingest_report
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import utc_now
from core.logging import configure_logging

TOKEN = "bench-token-" + "0" * 32  # a throw-away token for a local benchmark server
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
TARGETS = {"reports_per_s": 2000, "ingest_p99_ms": 50, "summary_p99_ms": 100, "reregister_burst_s": 30}
GPUS = 8


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, round(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _report(node: str, seq: int, epoch: str | None = None) -> dict[str, Any]:
    """A healthy 8-GPU node's report, as an agent sends it every interval (``epoch``: after a restart)."""
    body: dict[str, Any] = {
        "schema": "gpuhealth.report/v1",
        "node": node,
        "seq": seq,
        "sent_at": "2026-12-02T00:00:00Z",
        "interval_s": 3600,
        "orchestrator": "kubernetes",
        "state": "healthy",
        "verdict": {"node": node, "status": "ok", "action": "none", "findings": []},
        "gpus": [
            {"uuid": f"GPU-{node}-{i}", "index": i, "name": "NVIDIA H200", "status": "ok"}
            for i in range(GPUS)
        ],
        "labels": {"topology.kubernetes.io/zone": "zone-a", "nvidia.com/gpu.product": "NVIDIA-H200"},
    }
    if epoch is not None:
        body["epoch"] = epoch
    return body


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A live aggregator process for one database (``database_url`` None: the baseline server instead)."""

    def __init__(self, database_url: str | None, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if database_url is None:
            command = ["-m", "bench.baseline_server", str(self.port), TOKEN]
        else:
            config = workdir / f"bench-{self.port}.yaml"
            section = {"port": self.port, "token": TOKEN, "database_url": database_url}
            config.write_text(yaml.safe_dump({"aggregator": section}))
            command = ["-m", "aggregator", "--config", str(config)]
        self.process = subprocess.Popen(
            [sys.executable, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("aggregator did not start")

    def stop(self) -> None:
        """Terminate the aggregator process and wait for it."""
        self.process.terminate()
        self.process.wait(timeout=30)


async def _send(
    url: str, bodies: list[bytes], concurrency: int, rate: float | None = None
) -> tuple[float, list[float]]:
    """Send every body over ``concurrency`` keep-alive connections; returns wall time and latencies.

    Without ``rate``, as fast as the server answers (a closed loop). With ``rate`` (reports/s), each
    report is due at its own time as agents would send it, and its latency counts from that time, so a
    server that falls behind shows it (no coordinated omission). A minimal HTTP/1.1 client over asyncio
    streams: httpx costs more CPU per request than the server itself, and on a small machine the load
    generator would otherwise measure mostly itself.
    """
    parsed = httpx.URL(url)
    latencies: list[float] = []
    queue = iter(enumerate(bodies))
    begin = time.perf_counter()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
        head = (
            f"POST /v1/reports HTTP/1.1\r\nHost: {parsed.host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()
        try:
            for number, body in queue:
                started = time.perf_counter()
                if rate is not None:
                    due = begin + number / rate
                    if due > started:
                        await asyncio.sleep(due - started)
                    started = due
                writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
                status, answer = await _read_response(reader)
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    raise RuntimeError(f"report refused: {status} {answer[:200]!r}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    header = await reader.readuntil(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    return status, await reader.readexactly(length)


async def _burst(url: str, bodies: list[bytes]) -> tuple[float, list[float], Counter[str]]:
    """Every body on its own new connection, all at once: a fleet's agents restarting together.

    Returns the wall time until the last answer, the latencies of the answered ones, and the count of each
    outcome (HTTP status, or the connection error), so that a refusal is counted rather than fatal.
    """
    parsed = httpx.URL(url)
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()

    async def agent(body: bytes) -> None:
        started = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
        except OSError as exc:
            outcomes[type(exc).__name__] += 1
            return
        try:
            writer.write(
                f"POST /v1/reports HTTP/1.1\r\nHost: {parsed.host}\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status, _ = await _read_response(reader)
            outcomes[str(status)] += 1
            latencies.append(time.perf_counter() - started)
        except (OSError, asyncio.IncompleteReadError) as exc:
            outcomes[type(exc).__name__] += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(agent(body) for body in bodies))
    return time.perf_counter() - started, latencies, outcomes


def _burst_stats(wall: float, latencies: list[float], outcomes: Counter[str]) -> dict[str, Any]:
    ordered = sorted(latencies) or [0.0]
    return {
        "reports": sum(outcomes.values()),
        "wall_s": round(wall, 2),
        "p99_ms": round(_percentile(ordered, 0.99) * 1000, 2),
        "outcomes": dict(sorted(outcomes.items())),
        "server_errors": sum(n for outcome, n in outcomes.items() if not outcome.startswith(("2", "4"))),
    }


def _ingest_stats(wall: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "reports": len(ordered),
        "reports_per_s": round(len(ordered) / wall, 1),
        "p50_ms": round(_percentile(ordered, 0.50) * 1000, 2),
        "p99_ms": round(_percentile(ordered, 0.99) * 1000, 2),
    }


def _summary_latency(url: str, runs: int) -> dict[str, float]:
    durations: list[float] = []
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        client.get("/v1/fleet").raise_for_status()
        for _ in range(runs):
            started = time.perf_counter()
            client.get("/v1/fleet").raise_for_status()
            durations.append(time.perf_counter() - started)
    ordered = sorted(durations)
    return {
        "p50_ms": round(_percentile(ordered, 0.5) * 1000, 2),
        "p99_ms": round(_percentile(ordered, 0.99) * 1000, 2),
    }


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc); 0 where that is not available."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _store_only(database_url: str, nodes: int) -> float:
    """Reports per second through ``ingest_report`` alone (validation + one transaction), no HTTP."""
    settings = AggregatorSettings(token=TOKEN, database_url=database_url)
    database = open_database(settings)
    reports = [Report.model_validate(_report(f"node-{n}", 10)) for n in range(nodes)]
    started = time.perf_counter()
    for report in reports:
        with database.write() as conn:
            ingest_report(conn, report, settings, utc_now())
    wall = time.perf_counter() - started
    database.dispose()
    return round(nodes / wall, 1)


def _sustained_and_paced(
    server: Server, nodes: int, concurrency: int, fleet_rate: float, seq: int
) -> tuple[dict[str, float], dict[str, float]]:
    """A round as fast as the server answers (with its CPU per report), then a round at ``fleet_rate``."""
    update = [json.dumps(_report(f"node-{n}", seq)).encode() for n in range(nodes)]
    cpu_before = _process_cpu_s(server.process.pid)
    sustained = _ingest_stats(*asyncio.run(_send(server.url, update, concurrency)))
    cpu_used = _process_cpu_s(server.process.pid) - cpu_before
    sustained["server_cpu_ms_per_report"] = round(cpu_used * 1000 / nodes, 3)
    paced = [json.dumps(_report(f"node-{n}", seq + 1)).encode() for n in range(nodes)]
    at_rate = _ingest_stats(*asyncio.run(_send(server.url, paced, 64, rate=fleet_rate)))
    at_rate["offered_per_s"] = round(fleet_rate, 1)
    return sustained, at_rate


def run_baseline(nodes: int, concurrency: int, workdir: Path, fleet_rate: float) -> dict[str, Any]:
    """The same rounds against ``bench.baseline_server`` (parse and validate only), as the yardstick."""
    server = Server(None, workdir)
    try:
        warm = [json.dumps(_report(f"node-{n}", 1)).encode() for n in range(min(nodes, 1000))]
        asyncio.run(_send(server.url, warm, concurrency))
        sustained, at_rate = _sustained_and_paced(server, nodes, concurrency, fleet_rate, seq=2)
    finally:
        server.stop()
    return {"sustained": sustained, "at_fleet_rate": at_rate}


def _with_ratios(result: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The product's figures beside the baseline's of the same run: throughput and CPU as fractions of the
    baseline's, latency as a multiple of it."""
    sustained, base = result["sustained"], baseline["sustained"]
    result["baseline"] = baseline
    result["ratio_to_baseline"] = {
        "reports_per_s": round(sustained["reports_per_s"] / base["reports_per_s"], 3),
        "server_cpu_per_report": round(
            sustained["server_cpu_ms_per_report"] / max(base["server_cpu_ms_per_report"], 1e-6), 3
        ),
        "at_fleet_rate_p99": round(
            result["at_fleet_rate"]["p99_ms"] / max(baseline["at_fleet_rate"]["p99_ms"], 1e-6), 3
        ),
    }
    return result


def run_backend(
    database_url: str, nodes: int, concurrency: int, workdir: Path, fleet_rate: float
) -> dict[str, Any]:
    """Register the nodes, send a round as fast as possible, a round at ``fleet_rate``, time the summary;
    then the baseline's rounds under the same conditions."""
    register = [json.dumps(_report(f"node-{n}", 1)).encode() for n in range(nodes)]
    server = Server(database_url, workdir)
    try:
        registration = _ingest_stats(*asyncio.run(_send(server.url, register, concurrency)))
        sustained, at_rate = _sustained_and_paced(server, nodes, concurrency, fleet_rate, seq=2)
        summary = _summary_latency(server.url, runs=20)
        restarted = [json.dumps(_report(f"node-{n}", 1, epoch="restarted")).encode() for n in range(nodes)]
        reregister = _burst_stats(*asyncio.run(_burst(server.url, restarted)))
    finally:
        server.stop()
    result = {
        "register": registration,
        "sustained": sustained,
        "at_fleet_rate": at_rate,
        "summary": summary,
        "reregister_burst": reregister,
        "store_only_reports_per_s": _store_only(database_url, min(nodes, 2000)),
    }
    return _with_ratios(result, run_baseline(nodes, concurrency, workdir, fleet_rate))


def _postgres_url(args: argparse.Namespace) -> tuple[str | None, Any]:
    if args.postgres_url:
        return args.postgres_url, None
    try:
        from tests.aggregator.postgres import PostgresServer, PostgresUnavailable
    except ImportError:
        return None, None
    try:
        server = PostgresServer.start()
    except PostgresUnavailable:
        return None, None
    return server.new_database(), server


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print one JSON object."""
    parser = argparse.ArgumentParser(prog="python -m bench.aggregator", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1,000 nodes instead of 10,000 (a few seconds)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--nodes", type=int, help="simulated nodes (default 10,000; 1,000 with --quick)")
    parser.add_argument("--concurrency", type=int, default=16, help="reports in flight (default 16)")
    parser.add_argument(
        "--postgres-url", help="benchmark this PostgreSQL database instead of a throw-away one"
    )
    args = parser.parse_args(argv)
    configure_logging("warning")  # logs to stderr: stdout carries only the JSON object
    nodes = args.nodes or (1000 if args.quick else 10_000)
    # The rate a 10,000-node fleet reporting every 30 s really sends (quick: the same rate, fewer reports).
    rate = 10_000 / 30
    result: dict[str, Any] = {
        "benchmark": "aggregator",
        "nodes": nodes,
        "gpus_per_node": GPUS,
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "targets": TARGETS,
    }
    with tempfile.TemporaryDirectory(prefix="gpuhealth-bench-") as tmp:
        workdir = Path(tmp)
        result["sqlite"] = run_backend(
            f"sqlite:///{workdir / 'bench.db'}", nodes, args.concurrency, workdir, rate
        )
        url, pg_server = _postgres_url(args)
        try:
            result["postgresql"] = (
                run_backend(url, nodes, args.concurrency, workdir, rate)
                if url
                else {"skipped": "no PostgreSQL: pass --postgres-url or install postgresql-15"}
            )
        finally:
            if pg_server is not None:
                pg_server.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
