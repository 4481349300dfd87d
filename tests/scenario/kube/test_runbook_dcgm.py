"""Runbook: the real agent on gpu-node-0 with the dcgm-exporter source on, scraping a real HTTP page on
127.0.0.1 (a recorded dcgm-exporter page), reporting to a live aggregator. An exporter outage is no fault;
a double-bit ECC error the exporter reports is handled like the one NVML reports."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_aggregator import LiveAggregator
from repo_paths import FIXTURES
from scenario_rig import NODE, KubeGpuNode

from agent.state.machine import DebounceConfig
from agent.uplink.client import AggregatorClient
from agent.uplink.link import AggregatorLink
from core.clock import ManualClock
from core.findings import Status
from core.health import NodeState
from tests.aggregator.postgres import free_port

TOKEN = "scenario-token-0123456789abcdef0123456789"
# GPU 1 has 3 volatile double-bit ECC errors; series are named by index (resolved through NVML's UUIDs).
PAGE = (FIXTURES / "dcgm" / "exporter-index-only.prom").read_bytes()


class _Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE if self.path == "/metrics" else b"not found"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # keep test output quiet
        return


@pytest.fixture
def exporter() -> Iterator[str]:
    """A dcgm-exporter serving the recorded page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


@pytest.fixture
def aggregator(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveAggregator]:
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN).start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", live.url)
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__TIMEOUT_S", "2")
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


@pytest.fixture
def oncall(aggregator: LiveAggregator) -> Iterator[AggregatorClient]:
    with AggregatorClient(aggregator.url, TOKEN, timeout_s=5.0, retries=1) as client:
        yield client


def scrape(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """The agent started next scrapes ``url`` on every pass."""
    monkeypatch.setenv("GPUHEALTH_DCGM__EXPORTER__ENABLED", "true")
    monkeypatch.setenv("GPUHEALTH_DCGM__EXPORTER__URL", url)
    monkeypatch.setenv("GPUHEALTH_DCGM__EXPORTER__EVERY_S", "1")
    monkeypatch.setenv("GPUHEALTH_DCGM__EXPORTER__TIMEOUT_S", "2")


def link(gpu_node: KubeGpuNode) -> AggregatorLink:
    assert gpu_node.agent.parts.link is not None
    return gpu_node.agent.parts.link


def test_exporter_down_reports_unknown_and_takes_no_action(
    gpu_node: KubeGpuNode, oncall: AggregatorClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dcgm-exporter enabled but nothing listens on its port -> the node reads ``unknown`` (condition
    Unknown, label unknown) on the cluster and on the aggregator, with no incident, no taint, no cordon and
    no warning Event: an exporter outage is not a GPU fault."""
    scrape(monkeypatch, f"http://127.0.0.1:{free_port()}/metrics")
    results = gpu_node.ticks(6)
    link(gpu_node).deliver()

    assert all(result.health.state is NodeState.UNKNOWN for result in results)
    assert all(result.health.incident is None for result in results)
    codes = {(f.code, f.status) for f in results[-1].verdict.findings}
    assert ("DCGM_EXPORTER_UNAVAILABLE", Status.UNKNOWN) in codes
    assert (gpu_node.label(), gpu_node.taint(), gpu_node.cordoned()) == ("unknown", None, False)
    condition = gpu_node.condition()
    assert condition is not None and condition["status"] == "Unknown"
    assert not any(reason in ("GPUHealthUnhealthy", "GPUHealthQuarantined") for reason in gpu_node.events())
    node = oncall.node(NODE)
    assert (node.state, node.incident) == ("unknown", None)


@pytest.mark.parametrize("source", ["nvml", "exporter"])
def test_double_bit_ecc_error_taints_the_node_whichever_source_reports_it(
    gpu_node: KubeGpuNode,
    oncall: AggregatorClient,
    monkeypatch: pytest.MonkeyPatch,
    exporter: str,
    source: str,
) -> None:
    """Volatile double-bit ECC errors on GPU 1, seen by NVML or only by dcgm-exporter -> the same incident
    (ECC_DBE_VOLATILE on GPU 1), the same taint, the same report to the aggregator. NVML's ECC check acts at
    once; the exporter's findings are polled, so they act after ``polled_bad_readings`` readings."""
    if source == "nvml":
        gpu_node.nvml.set_ecc_dbe(1, volatile=3)
    else:
        scrape(monkeypatch, exporter)
    results = gpu_node.ticks(DebounceConfig().polled_bad_readings)
    link(gpu_node).deliver()

    health = results[-1].health
    assert health.state is NodeState.UNHEALTHY
    assert health.incident is not None
    assert "ECC_DBE_VOLATILE" in health.incident.reasons
    assert health.incident.gpus == [results[-1].snapshot.gpus[1].uuid]
    assert health.incident.action.value == "reset_gpu"
    assert gpu_node.taint() == "reset_gpu:NoSchedule"
    assert gpu_node.label() == "unhealthy"
    node = oncall.node(NODE)
    assert node.state == "unhealthy"
    assert node.incident is not None and "ECC_DBE_VOLATILE" in node.incident.reasons
