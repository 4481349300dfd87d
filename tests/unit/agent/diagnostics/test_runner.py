"""Deep diagnostics' rules: due, idle, refusals, outcome, held findings, restart — with a real ``dcgmi``
process (a fake executable printing recorded DCGM output), a real state machine and a manual clock."""

from __future__ import annotations

import json
import stat
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from repo_paths import FIXTURES as TEST_FIXTURES
from waiting import SLOW_HANG_GUARD_S

from agent.backends.dcgm.dcgmi import DiagRun, run_diag
from agent.diagnostics.order import DiagOrder
from agent.diagnostics.runner import DiagnosticsRunner, spread_s
from agent.diagnostics.settings import DiagnosticsSettings
from agent.diagnostics.state import DiagnosticsState, DiagnosticsStore, RunningDiag
from agent.state.machine import AgentState, DebounceConfig, HealthStateMachine
from core.aggregator_api import DIAG_OUTPUT_MAX_BYTES
from core.clock import ManualClock
from core.findings import Status, Verdict
from core.health import NodeHealth, NodeState
from core.plan_memory import RemediationMemory
from core.snapshot import GpuSnapshot, NodeSnapshot
from core.steps import ApplyReport, SetTaint, StepResult

FIXTURES = TEST_FIXTURES / "dcgm"
NODE = "gpu-node-03"
SNAPSHOT = NodeSnapshot(
    node=NODE, gpus=[GpuSnapshot(index=0, uuid="GPU-zero"), GpuSnapshot(index=1, uuid="GPU-one")]
)

FAKE_DCGMI = """#!{python}
import sys
sys.stdout.write(open({fixture!r}).read())
sys.exit(226 if "fail" in {fixture!r} else 0)
"""


class Pods:
    """The idle probe: the GPU pods on the node, as a test sets them; ``broken`` when the API is down."""

    gpu_workload = "pod"

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.broken = False
        self.calls = 0

    def gpu_pods(self) -> list[str]:
        self.calls += 1
        if self.broken:
            raise OSError("API server unreachable")
        return list(self.names)


def fake_dcgmi(tmp_path: Path, fixture: str) -> str:
    script = tmp_path / "dcgmi"
    script.write_text(FAKE_DCGMI.format(python=sys.executable, fixture=str(FIXTURES / fixture)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


class Rig:
    """One node: a state machine, a runner and the loop's order of calls around them."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        fixture: str = "diag-3.1.0-r1-pass.json",
        pods: Pods | None = None,
        settings: DiagnosticsSettings | None = None,
        initial: AgentState | None = None,
        dcgmi: str | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.pods = pods if pods is not None else Pods()
        path = dcgmi or fake_dcgmi(tmp_path, fixture)

        def diag(level: int, timeout_s: float) -> DiagRun:
            return run_diag(level, timeout_s, path=path)

        self.store = DiagnosticsStore(tmp_path / "diagnostics.json")
        self.settings = settings or DiagnosticsSettings(enabled=True, every_s=3600.0, busy_retry_s=600.0)
        self.machine = HealthStateMachine(NODE, DebounceConfig(), clock=self.clock.now, initial=initial)
        self.runner = DiagnosticsRunner(
            NODE, self.settings, clock=self.clock, diag=diag, probe=self.pods, store=self.store
        )

    def tick(self, report: ApplyReport | None = None) -> NodeHealth:
        """settle -> verdict (with the runner's findings) -> observe -> prepare -> apply -> launch."""
        self.runner.settle(self.machine)
        verdict = Verdict.from_findings(NODE, self.runner.findings(SNAPSHOT))
        self.machine.observe(verdict)
        health = self.runner.prepare(self.machine, SNAPSHOT, dry_run=False)
        self.runner.launch(self.machine, report or ApplyReport())
        return health

    def finish(self) -> NodeHealth:
        """Let the running dcgmi end, then one pass settles it."""
        assert self.runner.wait(SLOW_HANG_GUARD_S)
        return self.tick()

    def until_due(self) -> None:
        due = self.runner.next_due_at
        assert due is not None
        self.clock.advance((due - self.clock.now()).total_seconds())

    def messages(self) -> list[tuple[str, str]]:
        return [(note.result, note.message) for note in self.runner.news()]


def test_scheduled_run_waits_for_its_slot_then_tests_an_idle_node_and_releases_it_after_a_pass(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    assert rig.tick().state is NodeState.HEALTHY
    assert rig.runner.next_due_at == rig.clock.now() + timedelta(seconds=spread_s(NODE, rig.settings))
    rig.until_due()
    assert rig.tick().state is NodeState.TESTING
    assert rig.runner.running
    assert rig.finish().state is NodeState.HEALTHY
    notes = rig.messages()
    assert notes[0] == ("ok", "dcgmi diag level 1 (scheduled) started")
    result, message = notes[1]
    assert result == "ok"
    assert message.startswith("dcgmi diag level 1 (scheduled) passed in ")
    assert "pass" in message.split(": ", 1)[1]  # the per-test summary
    assert rig.runner.next_due_at is not None
    assert rig.runner.next_due_at > rig.clock.now() + timedelta(seconds=3000)


def test_busy_node_skips_the_scheduled_run_and_tries_again_at_the_next_slot(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pods=Pods("ml/train-0"))
    rig.tick()
    rig.until_due()
    assert rig.tick().state is NodeState.HEALTHY
    assert not rig.runner.running
    [(result, message)] = rig.messages()
    assert result == "skipped"
    assert "busy: 1 pod(s) use the GPUs: ml/train-0" in message
    assert rig.runner.next_due_at == rig.clock.now() + timedelta(seconds=600)
    rig.pods.names.clear()
    rig.clock.advance(599)
    assert rig.tick().state is NodeState.HEALTHY  # not yet the next slot
    rig.clock.advance(1)
    assert rig.tick().state is NodeState.TESTING


def test_idle_probe_is_asked_only_when_a_run_is_due(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    for _ in range(5):
        rig.tick()
    assert rig.pods.calls == 0
    rig.until_due()
    rig.tick()
    assert rig.pods.calls == 1


def test_unreadable_pods_count_as_busy_never_as_idle(tmp_path: Path) -> None:
    pods = Pods()
    pods.broken = True
    rig = Rig(tmp_path, pods=pods)
    rig.runner.request(DiagOrder(level=2, requested_by="alice", request_id=7))
    assert rig.tick().state is NodeState.HEALTHY
    [(result, message)] = rig.messages()
    assert result == "skipped"
    assert "cannot tell whether pods use the GPUs: API server unreachable" in message


def test_on_demand_run_on_a_busy_node_is_refused_with_the_reason_unless_forced(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pods=Pods("ml/train-0", "ml/train-1"), settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=2, requested_by="alice", request_id=7))
    assert rig.tick().state is NodeState.HEALTHY
    [(result, message)] = rig.messages()
    assert result == "skipped"
    assert message == (
        "dcgmi diag level 2 (requested by alice) refused: busy: 2 pod(s) use the GPUs: ml/train-0, "
        "ml/train-1 (use --force to run anyway)"
    )
    rig.runner.request(DiagOrder(level=2, requested_by="alice", force=True, request_id=8))
    assert rig.tick().state is NodeState.TESTING
    assert rig.finish().state is NodeState.HEALTHY
    assert [result for result, _ in rig.messages()] == ["ok", "ok"]


def test_scheduled_run_never_starts_on_a_node_that_is_not_healthy(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.tick()
    rig.machine.quarantine("bad fan")
    rig.until_due()
    assert rig.tick().state is NodeState.QUARANTINED
    [(result, message)] = rig.messages()
    assert (result, message.split(": ", 1)[1].split(";")[0]) == ("skipped", "the node is quarantined")


def test_failed_run_opens_an_incident_at_once_and_its_findings_hold_until_a_human_releases(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, fixture="diag-4.2.3-r2-memory-fail.json", settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=2, requested_by="alice", request_id=7))
    assert rig.tick().state is NodeState.TESTING
    health = rig.finish()
    assert health.state is NodeState.UNHEALTHY  # straight from testing: the taint never lapses
    assert health.incident is not None
    assert "DCGM_DIAG_MEMORY" in health.incident.reasons
    assert health.incident.gpus == ["GPU-one"]
    _, (result, message) = rig.messages()
    assert result == "failed"
    assert "failed in" in message
    assert "memory fail" in message
    for _ in range(5):  # a diagnostic is not re-polled: its verdict does not fade after clean readings
        rig.clock.advance(600)
        assert rig.tick().incident is not None
    rig.machine.release_by_human("GPU replaced")
    rig.tick()
    assert rig.runner.findings(SNAPSHOT) == []
    for _ in range(DebounceConfig().clean_readings_to_recover):  # its warnings held it degraded meanwhile
        health = rig.tick()
    assert (health.state, health.incident) == (NodeState.HEALTHY, None)


def test_dcgmi_that_cannot_run_is_reported_and_is_no_fault(tmp_path: Path) -> None:
    rig = Rig(tmp_path, dcgmi=str(tmp_path / "missing-dcgmi"), settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=1, requested_by="alice", force=True, request_id=3))
    assert rig.tick().state is NodeState.TESTING
    assert rig.finish().state is NodeState.HEALTHY
    _, (result, message) = rig.messages()
    assert result == "failed"
    assert "could not run" in message
    assert "not found" in message
    assert rig.runner.findings(SNAPSHOT) == []


def test_run_is_called_off_when_the_testing_taint_could_not_be_set(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=1, requested_by="alice", request_id=3))
    failed_taint = ApplyReport([StepResult(SetTaint("testing", "NoSchedule"), ok=False, detail="HTTP 503")])
    assert rig.tick(failed_taint).state is NodeState.TESTING  # the verdict of this pass was already out
    assert not rig.runner.running
    assert rig.machine.health.state is NodeState.HEALTHY
    [(result, message)] = rig.messages()
    assert (result, message) == (
        "failed",
        "dcgmi diag level 1 (requested by alice) not started: could not taint the node: HTTP 503",
    )


def test_agent_restarted_mid_run_leaves_testing_and_says_the_run_was_interrupted(tmp_path: Path) -> None:
    first = Rig(tmp_path, settings=DiagnosticsSettings())
    first.tick()
    first.runner.request(DiagOrder(level=3, requested_by="alice", request_id=3))
    first.tick()
    saved = first.machine.export(RemediationMemory())
    assert saved.health.state is NodeState.TESTING
    assert first.store.load().running is not None
    assert first.runner.wait(SLOW_HANG_GUARD_S)

    second = Rig(tmp_path, settings=DiagnosticsSettings(), initial=saved)  # the process died mid-run
    assert second.machine.health.state is NodeState.TESTING
    assert second.tick().state is NodeState.HEALTHY
    [(result, message)] = second.messages()
    assert result == "failed"
    assert "level 3" in message
    assert "interrupted by an agent restart" in message
    assert second.store.load().running is None


def test_schedule_slot_survives_a_restart(tmp_path: Path) -> None:
    first = Rig(tmp_path)
    due = first.runner.next_due_at
    second = Rig(tmp_path)
    assert second.runner.next_due_at == due


def test_held_findings_of_a_failed_run_survive_a_restart(tmp_path: Path) -> None:
    store = DiagnosticsStore(tmp_path / "diagnostics.json")
    rig = Rig(tmp_path, fixture="diag-4.2.3-r2-memory-fail.json", settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=2, requested_by="alice", request_id=7))
    rig.tick()
    rig.finish()
    held = store.load()
    assert held.failed_incident is not None
    assert {f.code for f in held.failed_findings} >= {"DCGM_DIAG_MEMORY"}
    assert all(f.status in (Status.FAIL, Status.WARN) for f in held.failed_findings)


def test_on_demand_off_refuses_requests(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=DiagnosticsSettings(on_demand=False))
    rig.runner.request(DiagOrder(level=1, requested_by="alice", request_id=3))
    assert rig.tick().state is NodeState.HEALTHY
    [(result, message)] = rig.messages()
    assert result == "skipped"
    assert "on-demand diagnostics are off" in message


@pytest.mark.parametrize("garbage", [b"{not json", b'{"running": 5}'])
def test_unreadable_diagnostics_file_is_a_fresh_start(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "diagnostics.json"
    path.write_bytes(garbage)
    assert DiagnosticsStore(path).load() == DiagnosticsState()
    DiagnosticsStore(path).save(
        DiagnosticsState(running=RunningDiag(level=1, started_at=ManualClock().now(), requested_by="x"))
    )
    assert DiagnosticsStore(path).load().running is not None


def test_the_result_carries_dcgmis_raw_output_redacted_and_bounded(tmp_path: Path) -> None:
    """The evidence for a hardware return: what dcgmi printed goes with the result, its last 64 KiB (the
    results come last), a secret-looking value in it redacted."""
    document = json.loads((FIXTURES / "diag-4.2.3-r2-memory-fail.json").read_text())
    document["host_engine"] = {"password": "hunter2-s3cret"}
    printed = "x" * (DIAG_OUTPUT_MAX_BYTES + 5000) + "\n" + json.dumps(document, indent=2)
    fixture = tmp_path / "diag-memory-fail-long.json"
    fixture.write_text(printed)
    script = tmp_path / "dcgmi"
    script.write_text(FAKE_DCGMI.format(python=sys.executable, fixture=str(fixture)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    rig = Rig(tmp_path, dcgmi=str(script), settings=DiagnosticsSettings())
    rig.tick()
    rig.runner.request(DiagOrder(level=2, requested_by="alice", force=True, request_id=9))
    rig.tick()
    rig.finish()
    started, finished = rig.runner.news()
    assert started.output is None  # only a result carries output
    assert finished.result == "failed" and finished.output is not None
    assert len(finished.output.encode()) == DIAG_OUTPUT_MAX_BYTES  # the tail, not the whole
    assert finished.output.endswith(printed[-1000:].replace('"hunter2-s3cret"', '"[redacted]"')[-200:])
    assert "hunter2-s3cret" not in finished.output and '"password": "[redacted]"' in finished.output
    assert json.loads(finished.output[finished.output.index("{") :])["host_engine"] == {
        "password": "[redacted]"
    }
