"""Runbook: the recovery loop after the drain — reset or reboot, validate, release (docs/recovery.md).

Real agents (``build_agent``: fake NVML, the Kubernetes executor with drain on, recovery on) against an
emulated API server with its controllers on real time and a live aggregator granting permits. The GPU reset
command is a stand-in for ``nvidia-smi --gpu-reset -i N``: a small script that records the reset (or fails
on demand); before each pass the test applies the recorded resets to the node's FakeNvml, as the driver
would. The reboot is kured's: the agent writes the sentinel file, the test "reboots" the node (FakeNvml
reboot, a new boot id, the sentinel gone with /var/run) and starts a new agent process on it. Each agent's
clock is real time that the test can move forward (the backoff between attempts, the reboot deadline), and
``dcgmi`` is a stand-in that prints a saved ``dcgmi diag -j`` output once the test lets it finish.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fleet_rig import incident_actions
from live_aggregator import LiveAggregator, free_port
from repo_paths import FIXTURES as TEST_FIXTURES
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent, TickResult
from agent.recovery.settings import RebootSettings, RecoverySettings, ValidationSettings
from agent.settings import AgentSettings, HttpSettings
from agent.state.machine import RECOVERY_FAILED
from core.clock import ManualClock, RealClock, utc_now
from core.findings import Action
from core.health import NodeState
from core.steps import Reboot, Reset, Validate, WithdrawReboot
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml
from sim.kube.harness import KubeSim, running_kube_sim
from sim.simulated_recovery import SimulatedNodeRecovery

NS = "train"
TOKEN = "recovery-scenario-token-0123456789abcdef0123456789"
FLEET = 4
CLEAN_READINGS = 2
TAINT_KEY = "gpuhealth.io/unhealthy"
STATE_LABEL = "gpuhealth.io/state"
FIXTURES = TEST_FIXTURES / "dcgm"
NO_DCGMI = "gpuhealth-no-dcgmi-here"
FAST_DRAIN = DrainPolicy(poll_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2, pod_timeout_s=10.0)
FAKE_NVIDIA_SMI = """\
import pathlib, sys
log = pathlib.Path(sys.argv[1])
if (log.parent / "fail").exists():
    sys.stderr.write("Unable to reset GPU " + sys.argv[-1] + ": an internal driver error occurred")
    sys.exit(255)
with log.open("a") as out:
    out.write(sys.argv[-1] + "\\n")
"""
FAKE_DCGMI = """\
import pathlib, sys, time
here = pathlib.Path(__file__).parent
with (here / "dcgmi-runs.log").open("a") as out:
    out.write(" ".join(sys.argv[1:]) + "\\n")
give_up = time.monotonic() + 20
while not (here / "dcgmi-go").exists() and time.monotonic() < give_up:
    time.sleep(0.02)
sys.stdout.write((here / "diag.json").read_text())
"""


class MovableClock(RealClock):
    """Real time, plus whatever the test moved it forward by (a wait the test does not sit through)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.offset_s)

    def monotonic(self) -> float:
        return super().monotonic() + self.offset_s

    def forward(self, seconds: float) -> None:
        self.offset_s += seconds


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    with running_kube_sim(clock=RealClock(), nodes=FLEET, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


@pytest.fixture
def aggregator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAggregator]:
    live = LiveAggregator(tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN, budget_min_nodes=2)
    live.start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


class Node:
    """One GPU node of the fleet: its FakeNvml, its files (boot id, kured sentinel, reset log), its agent."""

    def __init__(self, name: str, root: Path, settings: Callable[[Node], AgentSettings]) -> None:
        self.name = name
        self.root = root
        root.mkdir(parents=True)
        self.nvml = FakeNvml("h100_sxm", 8, seed=11, node_name=name)
        self.boot = 1
        self.boot_id_path.write_text("boot-1\n")
        (root / "fake_nvidia_smi.py").write_text(FAKE_NVIDIA_SMI)
        self._settings = settings
        self.agent: Agent | None = None
        self.clock = MovableClock()
        self.simulated: SimulatedNodeRecovery | None = None  # set: no command, no file (the demo's way)

    @property
    def boot_id_path(self) -> Path:
        return self.root / "boot_id"

    @property
    def sentinel(self) -> Path:
        return self.root / "reboot-required"

    @property
    def reset_log(self) -> Path:
        return self.root / "resets.log"

    def reset_command(self) -> list[str]:
        script = self.root / "fake_nvidia_smi.py"
        return [sys.executable, str(script), str(self.reset_log), "--gpu-reset", "-i", "{index}"]

    def start(self, kube: KubeSim) -> Agent:
        from agent.wiring import build_agent

        self.agent = build_agent(
            self._settings(self),
            library=self.nvml,
            api_client=kube.api_client(),
            clock=self.clock,
            recovery_actions=self.simulated,
        )
        return self.agent

    def apply_recorded_resets(self) -> list[int]:
        """What the driver does for each ``nvidia-smi --gpu-reset`` the agent ran: reset that GPU."""
        if not self.reset_log.exists():
            return []
        indexes = [int(line) for line in self.reset_log.read_text().split()]
        self.reset_log.unlink()
        for index in indexes:
            self.nvml.reset_gpu(index)
        return indexes

    def kured_reboots(self) -> None:
        """kured saw the sentinel: the node reboots (GPUs back, new boot id, /var/run emptied)."""
        assert self.sentinel.exists(), "no reboot was requested"
        assert self.agent is not None
        self.agent.close()  # the agent's process dies with the node
        self.nvml.reboot()
        self.boot += 1
        self.boot_id_path.write_text(f"boot-{self.boot}\n")
        self.sentinel.unlink()


class Fleet:
    """The nodes the tests break, their agents, and what the API server and the aggregator hold."""

    def __init__(self, kube: KubeSim, aggregator: LiveAggregator, root: Path) -> None:
        self.kube = kube
        self.aggregator = aggregator
        self.root = root
        self.nodes: dict[str, Node] = {}
        self.max_attempts = 2
        self.exporter_url: str | None = None
        self.dcgmi = NO_DCGMI

    def settings(self, node: Node) -> AgentSettings:
        recovery = RecoverySettings(
            enabled=True,
            reset_command=node.reset_command(),
            reset_timeout_s=HANG_GUARD_S,
            reboot=RebootSettings(mode="kured", sentinel_path=node.sentinel),
            boot_id_path=node.boot_id_path,
            validation=ValidationSettings(clean_readings=CLEAN_READINGS),
            max_attempts=self.max_attempts,
        )
        dcgm: dict[str, Any] = {"dcgmi": {"path": self.dcgmi}}
        if self.exporter_url is not None:
            dcgm["exporter"] = {"enabled": True, "url": self.exporter_url, "timeout_s": 0.5}
        return AgentSettings(
            node_name=node.name,
            state_dir=node.root / "state",
            policy=RemediationPolicy(drain=True, cordon=True, drain_deadline_s=HANG_GUARD_S),
            drain_by="agent",
            drain=FAST_DRAIN,
            recovery=recovery,
            dcgm=dcgm,
            aggregator={"url": self.aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
            http=HttpSettings(enabled=False),
        )

    def node(self, name: str, *, simulated: bool = False) -> Node:
        """The node, its agent started and reported once (``simulated``: SimulatedNodeRecovery acts)."""
        if name not in self.nodes:
            self.nodes[name] = Node(name, self.root / name, self.settings)
            if simulated:
                self.nodes[name].simulated = SimulatedNodeRecovery(self.nodes[name].nvml, node=name)
            self.nodes[name].start(self.kube)
            self.tick(name)
        return self.nodes[name]

    def tick(self, name: str) -> TickResult:
        """The driver's side of any reset done last pass, then one pass, its report delivered."""
        node = self.nodes[name]
        node.apply_recorded_resets()
        assert node.agent is not None
        result = node.agent.tick()
        assert node.agent.parts.link is not None
        node.agent.parts.link.deliver()
        return result

    def restart(self, name: str) -> None:
        """A new agent process on the node (same state directory)."""
        self.nodes[name].start(self.kube)

    def drain_ends(self, name: str) -> None:
        agent = self.nodes[name].agent
        assert agent is not None
        assert agent.parts.executor.wait_for_drain(HANG_GUARD_S)

    # --- what the world sees --------------------------------------------------------------------------

    def kube_node(self, name: str) -> dict[str, Any]:
        node = self.kube.store.get("nodes", None, name)
        assert node is not None
        return node

    def taint(self, name: str) -> str | None:
        taints = self.kube_node(name)["spec"].get("taints") or []
        return next((t.get("value") for t in taints if t["key"] == TAINT_KEY), None)

    def label(self, name: str) -> str | None:
        labels: dict[str, str] = self.kube_node(name)["metadata"].get("labels") or {}
        return labels.get(STATE_LABEL)

    def cordoned(self, name: str) -> bool:
        return bool(self.kube_node(name)["spec"].get("unschedulable"))

    def timeline(self, incident_id: str) -> list[tuple[str, str, str]]:
        return incident_actions(self.aggregator, incident_id)

    def close(self) -> None:
        for node in self.nodes.values():
            if node.agent is not None:
                node.agent.close()


@pytest.fixture
def fleet(kube: KubeSim, aggregator: LiveAggregator, tmp_path: Path) -> Iterator[Fleet]:
    agents = Fleet(kube, aggregator, tmp_path / "nodes")
    yield agents
    agents.close()


def run_training_pod(fleet: Fleet) -> tuple[str, str]:
    """A one-pod training Job taking all 8 GPUs; returns (node, pod name) once it runs."""
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": spec}},
    }
    fleet.kube.store.create("jobs.batch", job)

    def running() -> list[dict[str, Any]]:
        return [
            pod
            for pod in fleet.kube.store.list("pods", NS)
            if pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
        ]

    wait_until(lambda: len(running()) == 1, message="the training pod to run")
    (pod,) = running()
    return pod["spec"]["nodeName"], pod["metadata"]["name"]


def recovery_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Reset | Reboot | Validate | WithdrawReboot)
    ]


def test_pending_row_remap_is_drained_reset_validated_and_released(fleet: Fleet) -> None:
    """A pending row remap on GPU 2 of the node running a training pod (its process on every GPU): tainted,
    drained (the pod evicted, its processes end), GPU 2 reset with a permit, validated (no dcgmi: clean
    readings), ``testing`` meanwhile, then released — taint off, our cordon lifted, label healthy, incident
    closed — with drain, reset and validation in the incident's timeline."""
    bad, pod = run_training_pod(fleet)
    node = fleet.node(bad)
    for gpu in range(8):
        node.nvml.start_process(gpu, pid=1000 + gpu)
    node.nvml.set_row_remap(2, pending=True, uncorrectable=1)

    opened = fleet.tick(bad)
    incident = opened.health.incident
    assert incident is not None and incident.action is Action.RESET_GPU
    assert fleet.taint(bad) == "reset_gpu"

    fleet.drain_ends(bad)
    assert fleet.kube.store.get("pods", NS, pod) is None  # evicted
    for gpu in range(8):  # the container's processes ended with the pod
        node.nvml.end_process(gpu, 1000 + gpu)
    reset = fleet.tick(bad)
    assert recovery_results(reset) == [("Reset", True, "attempt 1: GPU 2 reset")]

    validated = fleet.tick(bad)  # the driver applied the reset before this pass: the readings are clean
    assert [kind for kind, ok, _ in recovery_results(validated) if ok] == ["Validate"]
    testing = fleet.tick(bad)
    assert testing.health.state is NodeState.TESTING
    assert fleet.label(bad) == "testing" and fleet.taint(bad) == "reset_gpu"  # still tainted while testing

    released = fleet.tick(bad)
    assert released.health.state is NodeState.HEALTHY and released.health.incident is None
    assert fleet.taint(bad) is None and not fleet.cordoned(bad) and fleet.label(bad) == "healthy"
    assert node.nvml.gpu(2).remap_pending is False
    permits = node.agent.parts.permits if node.agent else None
    assert permits is not None and permits.held is None  # the permit went back to the budget
    timeline = fleet.timeline(incident.id)
    assert ("drain", "ok", "drain ok: drain started") in timeline
    assert any(a == "drain" and r == "ok" and "drain complete" in m for a, r, m in timeline)  # its outcome
    assert ("reset", "ok", "reset ok: attempt 1: GPU 2 reset") in timeline
    assert any(action == "validate" and result == "ok" for action, result, _ in timeline)
    with fleet.aggregator.client() as oncall:
        assert not oncall.incident(incident.id).open


def test_reset_that_keeps_failing_escalates_to_replace_and_stays_quarantined(fleet: Fleet) -> None:
    """The reset command fails on both attempts allowed, the second one only after the backoff (60 s, said
    in the timeline): the incident escalates to ``replace`` (RECOVERY_FAILED), the node stays tainted and
    cordoned, quarantined, the aggregator raises the escalation alert, and no further reset is tried."""
    bad = "gpu-node-1"
    node = fleet.node(bad)
    (node.root / "fail").touch()
    node.nvml.set_row_remap(0, pending=True, uncorrectable=1)
    incident = fleet.tick(bad).health.incident
    assert incident is not None
    fleet.drain_ends(bad)

    first = fleet.tick(bad)
    backing_off = fleet.tick(bad)
    node.clock.forward(60)
    second = fleet.tick(bad)

    assert [(kind, ok) for kind, ok, _ in recovery_results(first)] == [("Reset", False)]
    assert "Unable to reset GPU 0" in recovery_results(first)[0][2]
    assert recovery_results(first)[0][2].endswith("next attempt in 60 s")
    assert recovery_results(backing_off) == []
    assert any("attempt 2 in" in note and "backoff" in note for note in backing_off.notes)
    assert [(kind, ok) for kind, ok, _ in recovery_results(second)] == [("Reset", False)]
    assert recovery_results(second)[0][2].endswith("no attempt left: escalating to replace")
    later = [fleet.tick(bad) for _ in range(3)]
    assert all(recovery_results(result) == [] for result in later)
    health = later[-1].health
    assert health.state is NodeState.QUARANTINED and health.reason == RECOVERY_FAILED
    assert health.incident is not None and health.incident.id == incident.id
    assert health.incident.action is Action.REPLACE
    assert fleet.taint(bad) == "replace" and fleet.cordoned(bad) and fleet.label(bad) == "quarantined"
    with fleet.aggregator.client() as oncall:
        alerts = oncall.alerts()
        detail = oncall.incident(incident.id)
    assert any(a.kind == "incident_escalated" and a.details.get("action") == "replace" for a in alerts)
    assert detail.open and detail.action is Action.REPLACE
    failed = [m for a, r, m in fleet.timeline(incident.id) if a == "reset" and r == "failed"]
    assert len(failed) == 2


def test_xid_79_requests_a_reboot_and_the_node_coming_back_is_validated_and_released(fleet: Fleet) -> None:
    """XID 79 (GPU fell off the bus): drained, kured's sentinel written with a permit; the node stays
    unhealthy until it reboots; the new agent sees a new boot id, validates, shows ``testing``, and
    releases the node (taint and our cordon gone, label healthy)."""
    bad = "gpu-node-2"
    node = fleet.node(bad)
    node.nvml.lose_gpu(0)
    opened = fleet.tick(bad)
    incident = opened.health.incident
    assert incident is not None and incident.action is Action.REBOOT
    fleet.drain_ends(bad)

    requested = fleet.tick(bad)
    assert [(kind, ok) for kind, ok, _ in recovery_results(requested)] == [("Reboot", True)]
    assert node.sentinel.read_text() == f"gpuhealth {incident.id}\n"
    waiting = fleet.tick(bad)
    assert recovery_results(waiting) == [] and waiting.health.state is NodeState.UNHEALTHY

    node.kured_reboots()
    fleet.restart(bad)
    back = fleet.tick(bad)
    assert back.health.incident is not None and back.health.incident.id == incident.id
    (validation,) = recovery_results(back)
    assert validation[:2] == ("Validate", True) and validation[2].startswith("node came back")

    states = [fleet.tick(bad).health.state for _ in range(CLEAN_READINGS)]
    assert states == [NodeState.TESTING, NodeState.HEALTHY]
    assert fleet.taint(bad) is None and not fleet.cordoned(bad) and fleet.label(bad) == "healthy"
    timeline = fleet.timeline(incident.id)
    assert any(a == "reboot" and r == "ok" and "written for kured" in m for a, r, m in timeline)
    assert any(a == "validate" and r == "ok" and "node came back" in m for a, r, m in timeline)


def test_a_reboot_that_never_happens_fails_at_its_deadline_then_escalates(fleet: Fleet) -> None:
    """XID 79 with no kured on the node: the sentinel is written, the node waits ``unhealthy``; 30 minutes
    later with the same boot id the attempt failed (sentinel withdrawn, "no reboot within 1800 s" in the
    timeline); after the 60 s backoff a second request; its deadline passes too: ``replace``, quarantined."""
    bad = "gpu-node-2"
    node = fleet.node(bad)
    node.nvml.lose_gpu(0)
    incident = fleet.tick(bad).health.incident
    assert incident is not None and incident.action is Action.REBOOT
    fleet.drain_ends(bad)
    assert [(kind, ok) for kind, ok, _ in recovery_results(fleet.tick(bad))] == [("Reboot", True)]

    node.clock.forward(1799)
    assert recovery_results(fleet.tick(bad)) == []  # still within the deadline
    node.clock.forward(1)
    (overdue,) = recovery_results(fleet.tick(bad))
    assert overdue[:2] == ("WithdrawReboot", False)
    assert "no reboot within 1800 s" in overdue[2] and overdue[2].endswith("next attempt in 60 s")
    assert not node.sentinel.exists()  # kured will not reboot the node later, unasked

    node.clock.forward(60)
    assert [(kind, ok) for kind, ok, _ in recovery_results(fleet.tick(bad))] == [("Reboot", True)]
    assert node.sentinel.exists()
    node.clock.forward(1800)
    (last,) = recovery_results(fleet.tick(bad))
    assert last[:2] == ("WithdrawReboot", False) and "no attempt left" in last[2]

    health = fleet.tick(bad).health
    assert health.state is NodeState.QUARANTINED and health.reason == RECOVERY_FAILED
    assert fleet.taint(bad) == "replace" and fleet.label(bad) == "quarantined"
    timeline = fleet.timeline(incident.id)
    assert [r for a, r, m in timeline if a == "reboot" and "no reboot within" in m] == ["failed", "failed"]


def install_dcgmi(fleet: Fleet, root: Path, output: str) -> Path:
    """A ``dcgmi`` stand-in that logs each run, then prints ``output`` once ``dcgmi-go`` exists."""
    root.mkdir(parents=True, exist_ok=True)
    script = root / "dcgmi"
    script.write_text(f"#!{sys.executable}\n" + FAKE_DCGMI)
    script.chmod(0o755)
    (root / "diag.json").write_text((FIXTURES / output).read_text())
    fleet.dcgmi = str(script)
    return root


def dcgmi_runs(root: Path) -> list[str]:
    log = root / "dcgmi-runs.log"
    return log.read_text().splitlines() if log.exists() else []


def test_dcgmi_validation_runs_in_the_background_and_survives_an_agent_restart(
    fleet: Fleet, tmp_path: Path
) -> None:
    """After the reset, ``dcgmi diag -r 2`` starts on its own thread: the loop's passes return at once
    meanwhile (the node ``unhealthy``, its incident kept). The agent restarts mid-run: the new agent starts
    the diagnostic again rather than losing it; once it passes, ``testing``, then released."""
    dcgmi = install_dcgmi(fleet, tmp_path / "dcgmi", "diag-3.1.0-r1-pass.json")
    bad = "gpu-node-0"
    node = fleet.node(bad)
    node.nvml.set_row_remap(3, pending=True, uncorrectable=1)
    incident = fleet.tick(bad).health.incident
    assert incident is not None
    fleet.drain_ends(bad)
    assert [(kind, ok) for kind, ok, _ in recovery_results(fleet.tick(bad))] == [("Reset", True)]

    started = fleet.tick(bad)
    (validate,) = started.report.results[-1:]
    assert isinstance(validate.step, Validate) and validate.pending
    wait_until(lambda: len(dcgmi_runs(dcgmi)) == 1, message="dcgmi diag to start")
    assert dcgmi_runs(dcgmi) == ["diag -r 2 -j"]
    during = [fleet.tick(bad) for _ in range(3)]
    assert all(r.seconds < HANG_GUARD_S / 4 and recovery_results(r) == [] for r in during)
    assert all(r.health.state is NodeState.UNHEALTHY for r in during)

    fleet.restart(bad)  # the old process dies; its diagnostic with it
    resumed = fleet.tick(bad)
    assert resumed.health.incident is not None and resumed.health.incident.id == incident.id
    assert [r.pending for r in resumed.report.results if isinstance(r.step, Validate)] == [True]
    wait_until(lambda: len(dcgmi_runs(dcgmi)) == 2, message="the new agent's dcgmi diag to start")

    (dcgmi / "dcgmi-go").touch()
    assert node.agent is not None
    recovering = node.agent.parts.executor
    assert recovering.local.validation.wait(HANG_GUARD_S)  # type: ignore[attr-defined]
    passed = fleet.tick(bad)
    assert [(kind, ok) for kind, ok, _ in recovery_results(passed)] == [("Validate", True)]
    assert "dcgmi diag -r 2 passed" in recovery_results(passed)[0][2]
    states = [fleet.tick(bad).health.state for _ in range(CLEAN_READINGS)]
    assert states == [NodeState.TESTING, NodeState.HEALTHY]
    timeline = fleet.timeline(incident.id)
    assert any(a == "validate" and "started in the background" in m for a, r, m in timeline)
    assert any(a == "validate" and r == "ok" and "passed" in m for a, r, m in timeline)


def test_a_simulated_node_is_reset_and_rebooted_in_process_and_released(fleet: Fleet) -> None:
    """The demo's way (``build_agent(recovery_actions=SimulatedNodeRecovery(...))``): no reset command ever
    runs, no sentinel is written; the fake GPU is reset in process, and an XID 79 later is answered by a
    simulated reboot (new boot id, the lost GPU back) — each validated and the node released."""
    bad = "gpu-node-3"
    node = fleet.node(bad, simulated=True)
    simulated = node.simulated
    assert simulated is not None
    node.nvml.set_row_remap(5, pending=True, uncorrectable=1)
    fleet.tick(bad)
    fleet.drain_ends(bad)
    assert [(kind, ok) for kind, ok, _ in recovery_results(fleet.tick(bad))] == [("Reset", True)]
    assert simulated.resets == [5] and not node.reset_log.exists()
    states = [fleet.tick(bad).health.state for _ in range(CLEAN_READINGS + 1)]
    assert states[-1] is NodeState.HEALTHY and fleet.taint(bad) is None

    other = "gpu-node-2"  # another node: the aggregator's per-node cooldown holds a second drain of node-3
    rebooted = fleet.node(other, simulated=True)
    assert rebooted.simulated is not None
    rebooted.nvml.lose_gpu(1)
    incident = fleet.tick(other).health.incident
    assert incident is not None and incident.action is Action.REBOOT
    fleet.drain_ends(other)
    assert [(kind, ok) for kind, ok, _ in recovery_results(fleet.tick(other))] == [("Reboot", True)]
    assert rebooted.simulated.boot_id() == f"{other}-boot-2" and not rebooted.sentinel.exists()
    (validation,) = recovery_results(fleet.tick(other))
    assert validation[:2] == ("Validate", True) and validation[2].startswith("node came back")
    states = [fleet.tick(other).health.state for _ in range(CLEAN_READINGS)]
    assert states == [NodeState.TESTING, NodeState.HEALTHY]
    assert fleet.taint(other) is None and not fleet.cordoned(other) and fleet.label(other) == "healthy"


def test_exporter_down_reads_unknown_and_takes_no_action(fleet: Fleet) -> None:
    """dcgm-exporter configured but not answering: the node reads ``unknown`` — no incident, no taint, no
    cordon, no drain, no reset — even with recovery on."""
    fleet.exporter_url = f"http://127.0.0.1:{free_port()}/metrics"
    bad = "gpu-node-3"
    fleet.node(bad)

    results = [fleet.tick(bad) for _ in range(3)]

    assert all(r.health.state is NodeState.UNKNOWN and r.health.incident is None for r in results)
    assert all(recovery_results(r) == [] for r in results)
    assert fleet.label(bad) == "unknown" and fleet.taint(bad) is None and not fleet.cordoned(bad)
    assert any(f.status == "unknown" for f in results[-1].verdict.findings)
