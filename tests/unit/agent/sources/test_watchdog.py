"""The watchdog on the detectors: a fake NVML whose calls block, a DCGM source that stalls, a kernel-log
follower that dies. The loop is never held, a fault another source saw still taints on time, the stalled
readings turn unknown with their age, and a stall neither taints nor lifts a quarantine."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from executor_defaults import PerfectNode
from waiting import HANG_GUARD_S, wait_until

from agent.backends.kernel_log import KernelLogError
from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.xid_watcher import XidBuffer
from agent.loop import Agent, AgentParts, TickResult
from agent.sources.wakeups import XidFeed
from agent.sources.watchdog import Deadline, Stall, WatchedReadings, WatchedSnapshots, detector_stats
from agent.state.machine import DebounceConfig, HealthStateMachine
from agent.telemetry.metrics import AgentMetrics
from core.clock import ManualClock
from core.dcgm import DcgmReadings
from core.findings import Status
from core.health import NodeState
from core.snapshot import NodeSnapshot, XidEvent
from core.steps import SetTaint
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml

DEADLINE_S = 0.3
BOUND_S = 2.0  # a pass with a hung detector ends within the deadline plus the pass's own work


def test_a_call_past_its_deadline_is_a_stall_and_no_second_call_piles_up() -> None:
    release = threading.Event()
    started: list[int] = []

    def hanging() -> int:
        started.append(1)
        release.wait(HANG_GUARD_S)
        return 7

    deadline = Deadline("nvml", DEADLINE_S)
    first = deadline.run(hanging)
    assert isinstance(first, Stall) and first.waited_s >= DEADLINE_S
    second = deadline.run(hanging)  # the first still hangs: answered at once, no new thread
    assert isinstance(second, Stall) and len(started) == 1
    assert deadline.stats().stalls == 1 and deadline.stats().stalled_s > 0
    release.set()
    assert wait_until(lambda: deadline.stats().stalled_s == 0)
    assert deadline.run(lambda: 42) == 42  # answering again: asked again


def test_calls_share_one_worker_thread_that_ends_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker per call cost more than the call; one worker serves every call, and ends when idle."""
    monkeypatch.setattr("agent.sources.watchdog.IDLE_EXIT_S", 0.2)
    deadline = Deadline("nvml", DEADLINE_S)
    workers = {deadline.run(threading.get_ident) for _ in range(50)}
    assert len(workers) == 1 and threading.get_ident() not in workers
    assert wait_until(
        lambda: not any(t.name == "watchdog:nvml" and t.ident in workers for t in threading.enumerate())
    ), "the idle worker did not end"
    assert deadline.run(lambda: 42) == 42  # a new worker for the next call


def test_an_exception_of_the_call_reaches_the_caller() -> None:
    def broken() -> int:
        raise RuntimeError("bug in a backend")

    with pytest.raises(RuntimeError, match="bug in a backend"):
        Deadline("nvml", DEADLINE_S).run(broken)


class Node:
    """One agent on fake GPUs whose NVML may hang, behind the watchdog, on a manual clock."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.nvml = FakeNvml("h100_sxm", 8, seed=1, node_name="node-1")
        self.executor = PerfectNode()
        buffer, wake = XidBuffer(), threading.Event()
        self.feed = XidFeed(wake=wake, nvml_buffer=buffer)
        backend = NvmlBackend(self.nvml, node_name="node-1", clock=self.clock.now, xid_buffer=buffer)
        self.deadline = Deadline("nvml", DEADLINE_S)
        source = WatchedSnapshots(backend, self.deadline, node="node-1", now=self.clock.now)
        machine = HealthStateMachine("node-1", DebounceConfig(min_dwell_s=60), clock=self.clock.now)
        parts = AgentParts(
            source=source,
            executor=self.executor,
            state_machine=machine,
            policy=RemediationPolicy(),
            feed=self.feed,
            wake=wake,
        )
        self.metrics = AgentMetrics("node-1")
        self.metrics.watch_detectors(detector_stats([self.deadline]))
        self.agent = Agent("node-1", parts, interval_s=10, clock=self.clock, metrics=self.metrics)
        self.release = threading.Event()

    def hang_nvml(self) -> None:
        self.nvml.hang = self.release

    def timed_tick(self) -> tuple[float, TickResult]:
        started = time.monotonic()
        result = self.agent.tick()
        return time.monotonic() - started, result


@pytest.fixture
def node() -> Iterator[Node]:
    made = Node()
    yield made
    made.release.set()
    made.agent.close()


def test_a_hung_nvml_never_holds_the_loop_and_a_kernel_log_fault_still_taints_on_time(node: Node) -> None:
    healthy = node.agent.tick()
    assert healthy.health.state is NodeState.HEALTHY
    address = healthy.snapshot.gpus[3].pci_bus_id
    node.hang_nvml()
    seconds, stalled = node.timed_tick()
    assert seconds < BOUND_S
    assert stalled.snapshot.nvml_error is not None and "watchdog" in stalled.snapshot.nvml_error
    assert [f.status for f in stalled.verdict.findings] == [Status.UNKNOWN]
    assert not any(isinstance(step, SetTaint) for step in stalled.steps)  # a stall is never a fault
    node.feed.on_kernel_xid(XidEvent(xid=79, source="kernel_log", pci_bus_id=address))
    seconds, faulted = node.timed_tick()
    assert seconds < BOUND_S  # NVML still hangs: the pass does not wait on it a second time
    assert any(isinstance(step, SetTaint) for step in faulted.steps)
    assert node.executor.facts().taint_value is not None


def test_a_stall_never_lifts_a_quarantine(node: Node) -> None:
    address = node.agent.tick().snapshot.gpus[2].pci_bus_id
    node.feed.on_kernel_xid(XidEvent(xid=79, source="kernel_log", pci_bus_id=address))
    node.agent.tick()
    assert node.agent.parts.state_machine.health.state is NodeState.UNHEALTHY
    node.hang_nvml()
    for _ in range(10):
        node.clock.advance(600)
        node.agent.tick()
    assert node.agent.parts.state_machine.health.state is NodeState.UNHEALTHY
    assert node.executor.facts().taint_value is not None


def test_stalls_are_counted_in_the_metrics(node: Node) -> None:
    node.agent.tick()
    node.hang_nvml()
    node.agent.tick()
    node.agent.tick()
    stalls = node.metrics.registry.get_sample_value(
        "gpuhealth_agent_detector_stalls_total", {"node": "node-1", "detector": "nvml"}
    )
    stalled = node.metrics.registry.get_sample_value(
        "gpuhealth_agent_detector_stalled_seconds", {"node": "node-1", "detector": "nvml"}
    )
    assert stalls == 1 and stalled is not None and stalled > 0
    node.release.set()
    assert wait_until(lambda: node.deadline.stats().stalled_s == 0)
    assert node.agent.tick().snapshot.nvml_error is None  # answering again: read again


def test_a_stalled_dcgm_source_reads_as_its_error() -> None:
    release = threading.Event()

    class Stuck:
        def read(self, snapshot: NodeSnapshot) -> DcgmReadings:
            release.wait(HANG_GUARD_S)
            return DcgmReadings()

    watched = WatchedReadings(
        Stuck(), Deadline("dcgmi", DEADLINE_S), stalled=lambda why: DcgmReadings(health_error=why)
    )
    try:
        readings = watched.read(NodeSnapshot(node="n", gpus=[]))
    finally:
        release.set()
    assert readings.health_error is not None and "dcgmi call has not answered" in readings.health_error


class DyingFollower:
    """A kernel-log follower whose thread ends (journalctl gone for good, a bug): it delivers nothing.
    ``refuse`` makes the next ones fail to start (the journal still unreadable)."""

    refuse = False

    def __init__(self) -> None:
        self.alive = False

    @property
    def running(self) -> bool:
        return self.alive

    def start(self) -> None:
        if type(self).refuse:
            raise KernelLogError("journalctl: cannot follow the journal: command not found")
        self.alive = True

    def stop(self) -> None:
        self.alive = False


def test_a_follower_that_stopped_is_reported_unknown_until_one_runs_again() -> None:
    clock = ManualClock()
    followers: list[DyingFollower] = []

    def factory(callback: object) -> DyingFollower:
        followers.append(DyingFollower())
        return followers[-1]

    feed = XidFeed(
        wake=threading.Event(), nvml_buffer=XidBuffer(), follower_factory=factory, monotonic=clock.monotonic
    )
    DyingFollower.refuse = False
    feed.start()
    empty = NodeSnapshot(node="n", gpus=[])
    assert feed.findings(empty) == []
    followers[0].alive = False  # its thread ended
    DyingFollower.refuse = True
    feed.ensure_watching()  # noticed at once; a new follower cannot start yet
    [finding] = feed.findings(empty)
    assert (finding.code, finding.status) == ("KERNEL_LOG_STOPPED", Status.UNKNOWN)
    clock.advance(30)
    DyingFollower.refuse = False
    feed.ensure_watching()  # within the retry pause: not tried again, still reported with its age
    assert len(followers) == 2 and "stopped 30 s ago" in feed.findings(empty)[0].message
    clock.advance(60)
    feed.ensure_watching()
    assert len(followers) == 3 and followers[2].running and feed.findings(empty) == []


def test_an_unknown_reading_carries_its_age_pass_after_pass(node: Node) -> None:
    """Unknown for 14 min: the stamp is when it turned unknown, kept while it stays unknown, never renewed."""
    node.agent.tick()
    node.hang_nvml()
    began = node.clock.now()
    first = node.agent.tick()
    node.clock.advance(14 * 60)
    later = node.agent.tick()
    [finding] = later.verdict.findings
    assert first.verdict.findings[0].since == finding.since == began
    assert finding.shown(node.clock.now()).startswith(
        "unknown for 14 min: NVML unavailable: nvml call has not answered"
    )
    node.release.set()
    assert wait_until(lambda: node.deadline.stats().stalled_s == 0)
    assert node.agent.tick().verdict.findings == []  # answering again: no unknown, no stamp
