"""The agent loop on a fake NVML and a stateful fake node executor (our own seams), on a manual clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from executor_defaults import ExecutorDefaults
from waiting import HANG_GUARD_S, wait_until

from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.xid_watcher import XidBuffer, XidWatcher
from agent.loop import Agent, AgentParts, Waiter
from agent.sources.wakeups import XidFeed
from agent.state.machine import DebounceConfig, HealthStateMachine
from agent.state.store import StateStore
from core.clock import ManualClock
from core.dcgm import DcgmReadings, ExporterGpu
from core.health import NodeState
from core.snapshot import NodeSnapshot
from core.steps import ApplyReport, EmitEvent, NodeFacts, SetTaint, Step, StepResult
from remediation.plan.planner import RemediationMemory, RemediationPolicy, facts_after
from sim.fakes.nvml import FakeNvml


class FakeNode(ExecutorDefaults):
    """A node executor that takes every step as a perfect API server would (``facts_after``), can be
    taken down (every step fails, as during an API outage), and lets a test play a human's edit."""

    def __init__(self) -> None:
        self.node = NodeFacts()
        self.applied: list[Step] = []
        self.dry_runs: list[Step] = []
        self.down = False
        self.closed = False
        self._changed = threading.Event()

    def facts(self) -> NodeFacts:
        return self.node

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        if dry_run:
            self.dry_runs.extend(steps)
            return ApplyReport([StepResult(step, ok=True, detail="dry run") for step in steps])
        if self.down:
            return ApplyReport([StepResult(step, ok=False, detail="HTTP 503") for step in steps])
        self.node = facts_after(self.node, steps)
        self.applied.extend(steps)
        return ApplyReport([StepResult(step, ok=True) for step in steps])

    def wait_for_change(self, timeout_s: float) -> bool:
        changed = self._changed.wait(timeout_s)
        self._changed.clear()
        return changed

    def close(self) -> None:
        self.closed = True

    def human_edit(self, **changes: object) -> None:
        self.node = replace(self.node, **changes)  # type: ignore[arg-type]
        self._changed.set()

    def events(self) -> list[str]:
        return [step.reason for step in self.applied if isinstance(step, EmitEvent)]


class Rig:
    """One agent on one fake GPU node, with its fake executor, state file and manual clock."""

    def __init__(
        self, tmp_path: Path, *, dry_run: bool = False, policy: RemediationPolicy | None = None
    ) -> None:
        self.clock = ManualClock()
        self.nvml = FakeNvml("h100_sxm", 8, seed=1, node_name="node-1")
        self.executor = FakeNode()
        self.store_path = tmp_path / "state.json"
        self.policy = policy or RemediationPolicy()
        self.dry_run = dry_run
        self.agent = self.new_agent()

    def new_agent(self, waiter: Waiter | None = None) -> Agent:
        wake = threading.Event()
        buffer = XidBuffer()
        store = StateStore(self.store_path)
        saved = store.load()
        feed = XidFeed(
            wake=wake,
            nvml_buffer=buffer,
            watcher_factory=lambda sink: XidWatcher(self.nvml, sink=sink, timeout_ms=20),
            monotonic=self.clock.monotonic,
        )
        parts = AgentParts(
            source=NvmlBackend(self.nvml, node_name="node-1", clock=self.clock.now, xid_buffer=buffer),
            executor=self.executor,
            state_machine=HealthStateMachine(
                "node-1", DebounceConfig(min_dwell_s=60), clock=self.clock.now, initial=saved
            ),
            policy=self.policy,
            store=store,
            memory=saved.memory if saved else RemediationMemory(),
            feed=feed,
            wake=wake,
        )
        return Agent("node-1", parts, interval_s=10, dry_run=self.dry_run, clock=self.clock, waiter=waiter)

    def inject_xid(self, xid: int, gpu: int = 0) -> None:
        """An XID on the fake GPU, delivered by the real watcher thread; waits until the loop is woken."""
        assert self.agent.parts.feed is not None
        self.agent.parts.feed.ensure_watching()
        assert self.nvml.inject_xid(gpu, xid)
        assert self.agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
        self.agent.wake.clear()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.agent.close()


def test_a_fresh_healthy_node_is_marked_once_then_never_written_again(rig: Rig) -> None:
    first = rig.agent.tick()
    assert first.health.state is NodeState.HEALTHY
    assert {type(step).__name__ for step in first.steps} == {"SetCondition", "SetStateLabel"}
    later = [rig.agent.tick() for _ in range(20)]
    assert all(result.steps == () for result in later)
    assert rig.agent.ticks == 21


def test_an_xid_wakes_the_loop_and_is_tainted_in_the_same_pass(rig: Rig) -> None:
    rig.agent.tick()
    rig.inject_xid(79)
    result = rig.agent.tick()
    assert result.health.state is NodeState.UNHEALTHY
    assert rig.executor.node.taint_value == "reboot"
    assert rig.executor.node.condition_status == "False"
    assert rig.executor.node.state_label == "unhealthy"
    assert "GPUHealthUnhealthy" in rig.executor.events()


def test_the_state_file_is_not_rewritten_while_the_node_stays_steady(rig: Rig) -> None:
    for _ in range(4):  # the debounce counters settle at their caps within a few readings
        rig.agent.tick()
    written = rig.store_path.stat().st_mtime_ns
    content = rig.store_path.read_bytes()
    for _ in range(5):
        rig.agent.tick()
    assert rig.store_path.read_bytes() == content
    assert rig.store_path.stat().st_mtime_ns == written


def test_a_restarted_agent_keeps_the_incident_and_emits_no_duplicate_event(rig: Rig) -> None:
    rig.agent.tick()
    rig.inject_xid(79)
    incident = rig.agent.tick().health.incident
    assert incident is not None
    rig.agent.close()
    restarted = rig.new_agent()
    result = restarted.tick()
    restarted.close()
    assert result.health.incident is not None
    assert result.health.incident.id == incident.id
    assert result.steps == ()
    assert rig.executor.events().count("GPUHealthUnhealthy") == 1


def test_dry_run_plans_every_step_and_changes_neither_node_nor_state_file(tmp_path: Path) -> None:
    rig = Rig(tmp_path, dry_run=True)
    try:
        rig.agent.tick()
        rig.inject_xid(79)
        result = rig.agent.tick()
    finally:
        rig.agent.close()
    assert any(isinstance(step, SetTaint) for step in result.steps)
    assert rig.executor.applied == []
    assert rig.executor.node == NodeFacts()
    assert any(isinstance(step, SetTaint) for step in rig.executor.dry_runs)
    assert not rig.store_path.exists()


def test_an_event_that_failed_during_an_outage_is_sent_when_the_api_returns(rig: Rig) -> None:
    rig.agent.tick()
    rig.executor.down = True
    rig.inject_xid(79)
    failed = rig.agent.tick()
    assert failed.report.results and not any(r.ok for r in failed.report.results)
    rig.executor.down = False
    rig.clock.advance(10)
    rig.agent.tick()
    assert rig.executor.node.taint_value == "reboot"
    assert rig.executor.events().count("GPUHealthUnhealthy") == 1
    rig.agent.tick()
    assert rig.executor.events().count("GPUHealthUnhealthy") == 1


def test_a_snapshot_source_that_raises_reads_as_unknown_not_a_crash(rig: Rig) -> None:
    class Broken:
        def snapshot(self) -> NodeSnapshot:
            raise RuntimeError("bug in a backend")

    rig.agent.parts.source = Broken()
    result = rig.agent.tick()
    assert result.snapshot.nvml_error is not None
    assert result.health.state is NodeState.UNKNOWN
    assert rig.executor.node.condition_status == "Unknown"


def test_dcgm_readings_join_the_snapshot_and_the_checks_judge_them(rig: Rig) -> None:
    """A DCGM source only reads; its readings travel in the pass's snapshot and the checks judge them."""
    seen: list[NodeSnapshot] = []

    class Exporter:
        def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
            seen.append(snapshot)
            first = snapshot.gpus[0]
            return DcgmReadings(exporter=[ExporterGpu(index=0, uuid=first.uuid, dbe_volatile=3)])

    class Dcgmi:
        def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
            return DcgmReadings(health_error="dcgmi: not found")

    rig.agent.parts.reading_sources = (Exporter(), Dcgmi())
    result = rig.agent.tick()
    assert seen and seen[0].dcgm is None, "a source reads the NVML snapshot, not its own output"
    dcgm = result.snapshot.dcgm
    assert dcgm is not None and dcgm.exporter is not None and dcgm.health_error == "dcgmi: not found"
    found = {(f.check, f.code) for f in result.verdict.findings}
    assert ("dcgm_exporter", "ECC_DBE_VOLATILE") in found
    assert ("dcgm_health", "DCGMI_UNAVAILABLE") in found


def test_a_missing_driver_is_unknown_never_unhealthy(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.nvml.set_driver_missing()
    try:
        results = [rig.agent.tick() for _ in range(5)]
    finally:
        rig.agent.close()
    assert all(result.health.state is NodeState.UNKNOWN for result in results)
    assert rig.executor.node.taint_value is None
    assert rig.agent.parts.feed is not None and not rig.agent.parts.feed.watching


def test_the_xid_watcher_starts_once_the_driver_appears(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.nvml.set_driver_missing()
    feed = rig.agent.parts.feed
    assert feed is not None
    try:
        rig.agent.tick()
        rig.nvml.set_driver_missing(False)
        rig.agent.tick()
        assert not feed.watching  # retried at most once a minute
        rig.clock.advance(61)
        rig.agent.tick()
        assert feed.watching
    finally:
        rig.agent.close()


def run_in_thread(agent: Agent) -> threading.Thread:
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    return thread


def test_run_ticks_at_once_on_an_xid_without_waiting_for_the_interval(rig: Rig) -> None:
    """interval 10 s on a manual clock that never moves: only the XID can cause the second pass."""
    thread = run_in_thread(rig.agent)
    try:
        assert wait_until(lambda: rig.agent.ticks >= 1)
        assert wait_until(lambda: rig.agent.parts.feed is not None and rig.agent.parts.feed.watching)
        rig.nvml.inject_xid(0, 79)
        assert wait_until(lambda: rig.executor.node.taint_value == "reboot")
    finally:
        rig.agent.stop()
        thread.join(HANG_GUARD_S)
    assert not thread.is_alive()


def test_run_repairs_drift_as_soon_as_the_node_changes(rig: Rig) -> None:
    thread = run_in_thread(rig.agent)
    try:
        assert wait_until(lambda: rig.agent.ticks >= 1)
        assert wait_until(lambda: rig.agent.parts.feed is not None and rig.agent.parts.feed.watching)
        rig.nvml.inject_xid(0, 79)
        assert wait_until(lambda: rig.executor.node.taint_value == "reboot")
        rig.executor.human_edit(taint_value=None, taint_effect=None)
        assert wait_until(lambda: rig.executor.node.taint_value == "reboot")
    finally:
        rig.agent.stop()
        thread.join(HANG_GUARD_S)


def test_run_survives_a_pass_that_raises_and_counts_it(rig: Rig) -> None:
    calls = {"n": 0}
    original = rig.executor.apply

    def flaky(steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the executor")
        return original(steps, dry_run=dry_run)

    rig.executor.apply = flaky  # type: ignore[method-assign]
    ticks_seen = threading.Event()

    def fast_wait(event: threading.Event, timeout: float) -> bool:
        rig.clock.advance(timeout)  # each wait moves the manual clock: passes follow each other at once
        ticks_seen.set()
        return False

    rig.agent._waiter = fast_wait  # the injected wait of the loop
    thread = run_in_thread(rig.agent)
    try:
        assert wait_until(lambda: rig.agent.ticks >= 2)
    finally:
        rig.agent.stop()
        thread.join(HANG_GUARD_S)
    assert rig.agent.tick_errors == 1
    assert (
        rig.agent.metrics.registry.get_sample_value("gpuhealth_agent_tick_errors_total", {"node": "node-1"})
        == 1
    )
    assert rig.executor.node.condition_status == "True"


def test_stop_closes_the_executor_and_the_xid_watcher(rig: Rig) -> None:
    thread = run_in_thread(rig.agent)
    assert wait_until(lambda: rig.agent.parts.feed is not None and rig.agent.parts.feed.watching)
    rig.agent.stop()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert rig.executor.closed
    assert rig.agent.parts.feed is not None and not rig.agent.parts.feed.watching
