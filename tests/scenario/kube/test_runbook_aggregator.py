"""Runbook: gpu-node-0's agent and a live aggregator (uvicorn on a free port, SQLite, a token) on the emulated
cluster. The agent is configured the way a DaemonSet does it, through ``GPUHEALTH_AGGREGATOR__*`` variables
and ``GPUHEALTH_AGGREGATOR_TOKEN``; the aggregator shares the scenario's manual clock. Each test plays the
sender thread's part with ``deliver()``, one step at a time, the way a runbook reads."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from live_aggregator import LiveAggregator
from scenario_rig import NODE, KubeGpuNode
from waiting import HANG_GUARD_S, wait_until

from agent.loop import TickResult
from agent.uplink.client import AggregatorClient
from agent.uplink.link import AggregatorLink
from core.clock import ManualClock
from core.steps import Drain
from remediation.plan.planner import RemediationPolicy

TOKEN = "scenario-token-0123456789abcdef0123456789"
HEARTBEAT_S = 60.0


@pytest.fixture
def aggregator(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveAggregator]:
    """A running aggregator, and every agent started from now on pointed at it."""
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN).start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", live.url)
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__HEARTBEAT_S", str(HEARTBEAT_S))
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__TIMEOUT_S", "2")
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


@pytest.fixture
def oncall(aggregator: LiveAggregator) -> Iterator[AggregatorClient]:
    """What ``gpuhealth status / node / quarantine / release`` talk through."""
    with AggregatorClient(aggregator.url, TOKEN, timeout_s=5.0, retries=1) as client:
        yield client


def link(gpu_node: KubeGpuNode) -> AggregatorLink:
    assert gpu_node.agent.parts.link is not None
    return gpu_node.agent.parts.link


def test_xid_79_shows_the_node_unhealthy_on_the_aggregator_with_its_incident(
    gpu_node: KubeGpuNode, oncall: AggregatorClient
) -> None:
    """XID 79 on gpu-node-0 -> tainted in the same pass, and the aggregator shows the node unhealthy with
    the incident (reason XID_79) and the taint in the incident's timeline."""
    gpu_node.tick()
    gpu_node.xid(79)
    incident = gpu_node.tick().health.incident
    link(gpu_node).deliver()

    assert incident is not None
    assert gpu_node.taint() == "reboot:NoSchedule"
    node = oncall.node(NODE)
    assert node.state == "unhealthy"
    assert node.incident is not None and node.incident.id == incident.id
    assert "XID_79" in node.incident.reasons
    timeline = oncall.incident(incident.id).timeline
    assert any(event.kind == "action" and "taint" in event.message for event in timeline)


def test_aggregator_down_during_a_fault_taints_at_once_and_delivers_in_order_later(
    gpu_node: KubeGpuNode, aggregator: LiveAggregator, oncall: AggregatorClient
) -> None:
    """The aggregator is down when XID 48 (double-bit ECC) strikes and the volatile DBE count stays: the
    node is tainted at once; the reports wait on disk (heartbeats collapsed); when the aggregator is back
    they are delivered in order and none is counted twice."""
    gpu_node.tick()
    link(gpu_node).deliver()
    aggregator.stop()

    gpu_node.nvml.set_ecc_dbe(0, volatile=1)
    gpu_node.xid(48)
    gpu_node.tick()
    assert gpu_node.taint() is not None
    gpu_node.ticks(18)  # three minutes of heartbeats while the aggregator is away
    assert link(gpu_node).deliver() == 0
    waiting = [report.seq for report in link(gpu_node).outbox.pending()]
    # the XID pass, the next pass (the one-off XID finding gone, the ECC one stays), then the newest
    # heartbeat standing for the earlier ones it replaced
    assert len(waiting) == 3
    assert waiting == sorted(waiting)

    aggregator.start()
    assert link(gpu_node).deliver() == 3
    assert link(gpu_node).deliver() == 0

    node = oncall.node(NODE)
    assert (node.state, node.reports_accepted, node.last_seq) == ("unhealthy", 4, waiting[-1])
    assert link(gpu_node).stats.repeated == 0
    assert link(gpu_node).outbox.stats().queued == 0


def test_an_agent_restarted_with_unsent_reports_delivers_them_after_the_restart(
    gpu_node: KubeGpuNode, aggregator: LiveAggregator, oncall: AggregatorClient
) -> None:
    """Aggregator down, XID 79, agent pod restarted: the new agent finds the unsent report in the outbox,
    delivers it once the aggregator is back, and its own reports continue the sequence (accepted)."""
    gpu_node.tick()
    link(gpu_node).deliver()
    aggregator.stop()
    gpu_node.xid(79)
    incident = gpu_node.tick().health.incident
    assert incident is not None

    gpu_node.restart_agent()
    aggregator.start()
    assert link(gpu_node).deliver() == 1
    gpu_node.ticks(1)  # the new agent reports at once: it knows nothing of what was said before
    link(gpu_node).deliver()

    node = oncall.node(NODE)
    assert node.incident is not None and node.incident.id == incident.id
    assert node.reports_accepted == 3
    assert link(gpu_node).stats.repeated == 0


def test_a_manual_quarantine_and_release_are_applied_and_acknowledged(
    gpu_node: KubeGpuNode, oncall: AggregatorClient
) -> None:
    """``gpuhealth quarantine gpu-node-0 --reason`` -> on its next heartbeat the agent learns of it, labels
    the node quarantined, taints it and acknowledges; ``gpuhealth release`` -> label healthy, taint gone."""
    gpu_node.tick()
    link(gpu_node).deliver()
    oncall.quarantine(NODE, reason="NVLink flaps under load", requested_by="oncall")

    gpu_node.ticks(6)  # the heartbeat's answer carries the request
    link(gpu_node).deliver()
    gpu_node.tick()
    link(gpu_node).deliver()

    assert gpu_node.label() == "quarantined"
    assert gpu_node.taint() == "replace:NoSchedule"
    assert oncall.pending_requests(NODE) == []
    assert oncall.node(NODE).state == "quarantined"

    oncall.release(NODE, reason="cable reseated", requested_by="oncall")
    gpu_node.ticks(6)
    link(gpu_node).deliver()
    gpu_node.tick()
    link(gpu_node).deliver()

    assert gpu_node.label() == "healthy"
    assert gpu_node.taint() is None
    assert oncall.pending_requests(NODE) == []
    assert oncall.node(NODE).state == "healthy"


def test_a_healthy_node_sends_heartbeats_only_and_writes_nothing_to_kubernetes(
    gpu_node: KubeGpuNode, oncall: AggregatorClient
) -> None:
    """Five minutes of a healthy node, ticking every 10 s: after the first pass (condition + label) no
    Kubernetes write at all, and the aggregator gets one report per heartbeat_s."""
    gpu_node.tick()
    link(gpu_node).deliver()
    writes = gpu_node.writes()

    for _ in range(30):
        gpu_node.ticks(1)
        link(gpu_node).deliver()

    assert gpu_node.writes() == writes
    assert oncall.node(NODE).reports_accepted == 1 + 5  # the first report + one heartbeat a minute


def test_a_permit_request_that_hangs_never_delays_the_taint(
    gpu_node: KubeGpuNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The aggregator accepts connections and never answers (a hung process, an overloaded database): XID 79
    -> the taint is on the node while the pass still waits for the drain permit; the pass then ends with the
    drain withheld. Mark and taint never wait for the network."""
    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(16)
        monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", f"http://127.0.0.1:{black_hole.getsockname()[1]}")
        monkeypatch.setenv("GPUHEALTH_AGGREGATOR__TIMEOUT_S", "3")
        monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
        gpu_node.policy = RemediationPolicy(drain=True)
        gpu_node.tick()
        gpu_node.xid(79)
        results: list[TickResult] = []
        worker = threading.Thread(target=lambda: results.append(gpu_node.tick()))
        worker.start()

        assert wait_until(lambda: gpu_node.taint() == "reboot:NoSchedule", timeout=2.0)
        assert worker.is_alive(), "the pass should still be waiting for the permit"
        worker.join(HANG_GUARD_S)

    assert not worker.is_alive() and len(results) == 1
    assert not any(isinstance(step, Drain) for step in results[0].steps)
    assert any("no permit for drain" in note for note in results[0].notes)


def test_a_lost_state_file_and_wiped_marks_continue_the_incident_the_aggregator_holds(
    gpu_node: KubeGpuNode, human: client.CoreV1Api, oncall: AggregatorClient
) -> None:
    """XID 79 reported to the aggregator; then someone runs the uninstall's clean-up line on the node (taint,
    label and incident annotation gone) and the agent restarts without its state file: the aggregator's open
    incident is read back, so the same incident continues and the taint goes on again."""
    gpu_node.tick()
    gpu_node.xid(79)
    incident = gpu_node.tick().health.incident
    link(gpu_node).deliver()
    assert incident is not None and oncall.node(NODE).incident is not None

    def wiped() -> None:
        (gpu_node.state_dir / "state.json").unlink()
        human.patch_node(
            NODE,
            {
                "metadata": {
                    "labels": {"gpuhealth.io/state": None},
                    "annotations": {"gpuhealth.io/incident": None},
                },
                "spec": {"taints": None},
            },
        )

    gpu_node.restart_agent(meanwhile=wiped)
    lost = gpu_node.agent.parts.lost_state
    assert lost is not None and wait_until(lambda: lost.answered), "the aggregator was never asked"
    resumed = gpu_node.tick().health.incident

    assert resumed is not None and resumed.id == incident.id
    assert resumed.started_at == incident.started_at
    assert gpu_node.taint() == "reboot:NoSchedule" and gpu_node.label() == "unhealthy"
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/incident"] == incident.id
