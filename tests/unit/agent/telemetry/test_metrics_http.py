"""The agent's metrics (per-agent registry) and its /metrics, /healthz, /readyz endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.telemetry.http import AgentHttpServer
from agent.telemetry.metrics import AgentMetrics
from core.findings import Action, Finding, Status, Verdict
from core.snapshot import GpuSnapshot, NodeSnapshot, XidEvent
from core.steps import ApplyReport, SetTaint, StepResult

TAKEN = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)


def snapshot(*, xids: tuple[int, ...] = (), nvml_error: str | None = None) -> NodeSnapshot:
    gpus = (
        []
        if nvml_error
        else [
            GpuSnapshot(index=0, uuid="GPU-a", xid_events=[XidEvent(xid=x, source="nvml") for x in xids]),
            GpuSnapshot(index=1, uuid="GPU-b"),
        ]
    )
    return NodeSnapshot(node="n1", taken_at=TAKEN, gpus=gpus, nvml_error=nvml_error)


def finding(gpu: str | None, status: Status, code: str, action: Action = Action.NONE) -> Finding:
    return Finding(check="xid", gpu=gpu, status=status, code=code, message=code, action=action)


def sample(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"node": "n1", **labels})


def test_gpu_health_gauge_is_the_worst_status_of_each_gpu() -> None:
    metrics = AgentMetrics("n1")
    verdict = Verdict.from_findings(
        "n1", [finding("GPU-a", Status.FAIL, "XID_79", Action.REBOOT), finding("GPU-b", Status.OK, "ECC_OK")]
    )
    metrics.record_tick(snapshot(), verdict, ApplyReport(), seconds=0.01, dry_run=False)
    assert sample(metrics, "gpuhealth_agent_gpu_health", gpu="GPU-a", index="0") == 2
    assert sample(metrics, "gpuhealth_agent_gpu_health", gpu="GPU-b", index="1") == 0


def test_findings_gauge_follows_the_current_verdict_and_drops_cleared_codes() -> None:
    metrics = AgentMetrics("n1")
    bad = Verdict.from_findings("n1", [finding("GPU-a", Status.FAIL, "XID_79", Action.REBOOT)])
    metrics.record_tick(snapshot(), bad, ApplyReport(), seconds=0.01, dry_run=False)
    assert sample(metrics, "gpuhealth_agent_findings", code="XID_79", status="fail") == 1
    metrics.record_tick(
        snapshot(), Verdict.from_findings("n1", []), ApplyReport(), seconds=0.01, dry_run=False
    )
    assert sample(metrics, "gpuhealth_agent_findings", code="XID_79", status="fail") is None


def test_xids_are_counted_by_code_across_ticks() -> None:
    metrics = AgentMetrics("n1")
    empty = Verdict.from_findings("n1", [])
    metrics.record_tick(snapshot(xids=(79, 13)), empty, ApplyReport(), seconds=0.01, dry_run=False)
    metrics.record_tick(snapshot(xids=(13,)), empty, ApplyReport(), seconds=0.01, dry_run=False)
    assert sample(metrics, "gpuhealth_agent_xid_events_total", xid="13") == 2
    assert sample(metrics, "gpuhealth_agent_xid_events_total", xid="79") == 1


def test_last_good_snapshot_moves_only_when_nvml_answered() -> None:
    metrics = AgentMetrics("n1")
    empty = Verdict.from_findings("n1", [])
    metrics.record_tick(snapshot(nvml_error="driver gone"), empty, ApplyReport(), seconds=0.01, dry_run=False)
    assert sample(metrics, "gpuhealth_agent_last_good_snapshot_timestamp_seconds") is None
    metrics.record_tick(snapshot(), empty, ApplyReport(), seconds=0.01, dry_run=False)
    assert sample(metrics, "gpuhealth_agent_last_good_snapshot_timestamp_seconds") == TAKEN.timestamp()


def test_actions_are_counted_by_type_and_result_and_dry_run_is_its_own_result() -> None:
    metrics = AgentMetrics("n1")
    empty = Verdict.from_findings("n1", [])
    step = SetTaint("reboot")
    report = ApplyReport([StepResult(step, ok=True), StepResult(step, ok=False, detail="HTTP 503")])
    metrics.record_tick(snapshot(), empty, report, seconds=0.01, dry_run=False)
    metrics.record_tick(
        snapshot(), empty, ApplyReport([StepResult(step, ok=True)]), seconds=0.01, dry_run=True
    )
    assert sample(metrics, "gpuhealth_agent_actions_total", action="SetTaint", result="ok") == 1
    assert sample(metrics, "gpuhealth_agent_actions_total", action="SetTaint", result="failed") == 1
    assert sample(metrics, "gpuhealth_agent_actions_total", action="SetTaint", result="dry_run") == 1


def test_two_agents_in_one_process_keep_separate_registries() -> None:
    first, second = AgentMetrics("n1"), AgentMetrics("n2")
    first.record_tick_error()
    assert first.registry.get_sample_value("gpuhealth_agent_tick_errors_total", {"node": "n1"}) == 1
    assert second.registry.get_sample_value("gpuhealth_agent_tick_errors_total", {"node": "n1"}) is None


@pytest.fixture
def probes() -> dict[str, bool]:
    return {"alive": True, "ready": False}


@pytest.fixture
def server(probes: dict[str, bool]) -> Iterator[AgentHttpServer]:
    metrics = AgentMetrics("n1")
    metrics.record_tick(
        snapshot(), Verdict.from_findings("n1", []), ApplyReport(), seconds=0.02, dry_run=False
    )
    running = AgentHttpServer(
        metrics.registry, alive=lambda: probes["alive"], ready=lambda: probes["ready"], port=0
    ).start()
    yield running
    running.stop()


def test_metrics_endpoint_serves_the_agents_registry_in_prometheus_text(server: AgentHttpServer) -> None:
    response = httpx.get(f"{server.url}/metrics", timeout=5)
    assert response.status_code == 200
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert {"gpuhealth_agent_gpu_health", "gpuhealth_agent_loop_duration_seconds"} <= names
    assert "python_gc_objects_collected" not in names  # no global default collectors


def test_probes_answer_200_or_503_from_the_agents_state(
    server: AgentHttpServer, probes: dict[str, bool]
) -> None:
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 503
    probes["ready"] = True
    probes["alive"] = False
    assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 503
    assert httpx.get(f"{server.url}/nope", timeout=5).status_code == 404


def test_a_stopped_server_releases_its_port() -> None:
    running = AgentHttpServer(AgentMetrics("n1").registry, alive=lambda: True, ready=lambda: True).start()
    url = running.url
    running.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=2)
