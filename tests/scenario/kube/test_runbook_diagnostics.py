"""Runbook: deep diagnostics on gpu-node-0 — a human's ``gpuhealth diag`` through a live aggregator, the real
agent on the emulated cluster, and a ``dcgmi`` on the node (a fake executable printing recorded DCGM output,
held running until the test lets it finish, so what the node looks like *during* the run can be checked).

The agent is configured as a DaemonSet would be (``GPUHEALTH_*`` variables); each test plays the report
sender's part with ``deliver()``, one step at a time."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from live_aggregator import LiveAggregator
from repo_paths import FIXTURES as TEST_FIXTURES
from scenario_rig import NODE, KubeGpuNode
from waiting import HANG_GUARD_S

from agent.diagnostics.runner import DiagnosticsRunner
from agent.uplink.client import AggregatorClient
from agent.uplink.link import AggregatorLink
from core.clock import ManualClock
from core.health import NodeState

TOKEN = "scenario-token-0123456789abcdef0123456789"
HEARTBEAT_S = 60
FIXTURES = TEST_FIXTURES / "dcgm"
PASS = "diag-3.1.0-r1-pass.json"
MEMORY_FAIL = "diag-4.2.3-r2-memory-fail.json"

# Waits for the gate file, then prints the recorded diag of the current outcome file.
FAKE_DCGMI = """#!{python}
import os, sys, time
deadline = time.monotonic() + {guard}
while not os.path.exists({gate!r}) and time.monotonic() < deadline:
    time.sleep(0.02)
fixture = open({outcome!r}).read().strip()
sys.stdout.write(open(fixture).read())
sys.exit(226 if "fail" in fixture else 0)
"""


class Dcgmi:
    """The node's ``dcgmi``: which recorded outcome it prints, and a gate that holds a run until opened."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.path = root / "dcgmi"
        self.gate = root / "gate"
        self.outcome = root / "outcome"
        self.prints(PASS)
        self.path.write_text(
            FAKE_DCGMI.format(
                python=sys.executable, guard=HANG_GUARD_S, gate=str(self.gate), outcome=str(self.outcome)
            )
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IEXEC)

    def prints(self, fixture: str) -> None:
        self.outcome.write_text(str(FIXTURES / fixture))

    def finish(self) -> None:
        self.gate.touch()


@pytest.fixture
def dcgmi(tmp_path: Path) -> Iterator[Dcgmi]:
    fake = Dcgmi(tmp_path / "dcgmi")
    yield fake
    fake.finish()  # no run outlives its test


@pytest.fixture
def aggregator(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, dcgmi: Dcgmi
) -> Iterator[LiveAggregator]:
    """A running aggregator, and every agent started from now on pointed at it, with dcgmi on the node."""
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN).start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", live.url)
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__TIMEOUT_S", "2")
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__HEARTBEAT_S", str(HEARTBEAT_S))
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    monkeypatch.setenv("GPUHEALTH_DCGM__DCGMI__PATH", str(dcgmi.path))
    yield live
    live.stop()


@pytest.fixture
def oncall(aggregator: LiveAggregator) -> Iterator[AggregatorClient]:
    """What ``gpuhealth diag / node / events`` talk through."""
    with AggregatorClient(aggregator.url, TOKEN, timeout_s=5.0, retries=1) as client:
        yield client


def link(gpu_node: KubeGpuNode) -> AggregatorLink:
    assert gpu_node.agent.parts.link is not None
    return gpu_node.agent.parts.link


def runner(gpu_node: KubeGpuNode) -> DiagnosticsRunner:
    assert gpu_node.agent.parts.diagnostics is not None
    return gpu_node.agent.parts.diagnostics


def exchange(gpu_node: KubeGpuNode) -> None:
    """One pass, and its report (if any) delivered."""
    gpu_node.tick()
    link(gpu_node).deliver()


def handover(gpu_node: KubeGpuNode) -> None:
    """A heartbeat's worth of passes: the heartbeat's answer carries the pending requests."""
    gpu_node.ticks(HEARTBEAT_S // 10)
    link(gpu_node).deliver()


def diag_entries(oncall: AggregatorClient) -> list[str]:
    return [
        e.message for e in oncall.node(NODE).timeline if e.kind == "action" and e.message.startswith("diag")
    ]


def ask(oncall: AggregatorClient, *, level: int = 1, force: bool = False) -> int:
    return oncall.diag(NODE, level=level, force=force, reason="suspect HBM").id


def test_on_demand_diag_on_an_idle_node_tests_it_tainted_then_releases_it_after_a_pass(
    gpu_node: KubeGpuNode, oncall: AggregatorClient, dcgmi: Dcgmi
) -> None:
    """``gpuhealth diag gpu-node-0 --level 2`` on an idle node -> labelled testing and tainted
    testing:NoSchedule while dcgmi runs -> healthy and untainted after it passed -> the result (passed,
    per-test summary, duration) in the node's timeline."""
    exchange(gpu_node)
    request_id = ask(oncall, level=2)
    handover(gpu_node)  # the heartbeat's answer hands the request over
    result = gpu_node.tick()  # applied: the node turns testing, the taint goes on, dcgmi starts

    assert result.health.state is NodeState.TESTING
    assert (gpu_node.label(), gpu_node.taint()) == ("testing", "testing:NoSchedule")
    condition = gpu_node.condition()
    assert condition is not None and condition["status"] == "Unknown"
    assert runner(gpu_node).running

    dcgmi.finish()
    assert runner(gpu_node).wait(HANG_GUARD_S)
    assert gpu_node.tick().health.state is NodeState.HEALTHY
    assert (gpu_node.label(), gpu_node.taint()) == ("healthy", None)

    link(gpu_node).deliver()
    node = oncall.node(NODE)
    assert node.pending_requests == []
    assert request_id not in [r.id for r in oncall.pending_requests(NODE)]
    started, passed = diag_entries(oncall)
    # Recorded as the caller the aggregator authenticated (this scenario's shared token), not a name sent along.
    assert started == "diag ok: dcgmi diag level 2 (requested by shared-token) started"
    assert passed.startswith("diag ok: dcgmi diag level 2 (requested by shared-token) passed in ")
    assert " s: " in passed
    assert "pass" in passed.rsplit(": ", 1)[1]
    assert any("diag" in e.message for e in oncall.events(node=NODE, since="1d"))


def test_failing_diag_opens_an_incident_and_the_node_stays_tainted(
    gpu_node: KubeGpuNode, oncall: AggregatorClient, dcgmi: Dcgmi
) -> None:
    """dcgmi diag finds a memory fault on GPU 1 -> an incident (DCGM_DIAG_MEMORY) opens in the pass that
    reads the result: the taint goes from testing straight to the incident's action, never lifted."""
    dcgmi.prints(MEMORY_FAIL)
    exchange(gpu_node)
    ask(oncall, level=2)
    handover(gpu_node)
    gpu_node.tick()
    assert gpu_node.taint() == "testing:NoSchedule"

    dcgmi.finish()
    assert runner(gpu_node).wait(HANG_GUARD_S)
    health = gpu_node.tick().health
    assert health.state is NodeState.UNHEALTHY
    assert health.incident is not None
    assert "DCGM_DIAG_MEMORY" in health.incident.reasons
    assert gpu_node.taint() == f"{health.incident.action.value}:NoSchedule"
    assert gpu_node.label() == "unhealthy"
    for result in gpu_node.ticks(6, every_s=60.0):  # the verdict of a diagnostic does not fade
        assert result.health.incident is not None

    link(gpu_node).deliver()
    node = oncall.node(NODE)
    assert node.state == "unhealthy"
    assert node.incident is not None and "DCGM_DIAG_MEMORY" in node.incident.reasons
    assert any(
        m.startswith("diag failed: dcgmi diag level 2") and "memory fail" in m for m in diag_entries(oncall)
    )
    # The evidence for a hardware return: what dcgmi printed came with the result, through the aggregator.
    [failed] = [
        e for e in oncall.node(NODE).timeline if e.kind == "action" and e.message.startswith("diag failed")
    ]
    printed = (FIXTURES / MEMORY_FAIL).read_text()
    assert json.loads(failed.details["output"]) == json.loads(printed)


def test_busy_node_refuses_the_request_with_the_reason_unless_forced(
    gpu_node: KubeGpuNode, oncall: AggregatorClient, human: client.CoreV1Api, dcgmi: Dcgmi
) -> None:
    """A training pod holds GPUs on gpu-node-0 -> the request is refused, the reason in the timeline, the
    node untouched; ``--force`` runs it anyway."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="train-0", namespace="default"),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[
                client.V1Container(
                    name="trainer",
                    image="trainer:1",
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "8"}),
                )
            ],
        ),
    )
    human.create_namespaced_pod("default", pod)
    exchange(gpu_node)
    ask(oncall, level=1)
    handover(gpu_node)
    assert gpu_node.tick().health.state is NodeState.HEALTHY
    assert (gpu_node.label(), gpu_node.taint()) == ("healthy", None)
    link(gpu_node).deliver()
    [refusal] = diag_entries(oncall)
    assert refusal == (
        "diag skipped: dcgmi diag level 1 (requested by shared-token) refused: busy: 1 pod(s) use the GPUs: "
        "default/train-0 (use --force to run anyway)"
    )

    ask(oncall, level=1, force=True)
    handover(gpu_node)
    gpu_node.tick()
    assert gpu_node.taint() == "testing:NoSchedule"
    dcgmi.finish()
    assert runner(gpu_node).wait(HANG_GUARD_S)
    gpu_node.tick()
    assert gpu_node.taint() is None


def test_agent_restarted_during_a_diag_never_leaves_the_node_testing(
    gpu_node: KubeGpuNode, oncall: AggregatorClient, dcgmi: Dcgmi
) -> None:
    """The agent pod restarts while dcgmi runs -> the new agent takes the node out of testing and lifts the
    taint at its first pass, and the timeline says the run was interrupted."""
    exchange(gpu_node)
    ask(oncall, level=3)
    handover(gpu_node)
    gpu_node.tick()
    assert gpu_node.label() == "testing"

    gpu_node.restart_agent()
    assert gpu_node.tick().health.state is NodeState.HEALTHY
    assert (gpu_node.label(), gpu_node.taint()) == ("healthy", None)
    link(gpu_node).deliver()
    assert any("interrupted by an agent restart" in m for m in diag_entries(oncall))
