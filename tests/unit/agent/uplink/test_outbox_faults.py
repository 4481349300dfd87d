"""The report outbox when the disk is full or the file is garbage: memory never says more than the disk,
no action is reported twice, and every unreadable file is kept (under a name of its own) and counted."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from executor_defaults import PerfectNode
from structlog.testing import capture_logs

from agent.loop import Agent
from agent.settings import AgentSettings, HttpSettings
from agent.uplink.link import AggregatorLink
from agent.uplink.outbox import OutboxError, ReportOutbox
from agent.wiring import build_agent
from core.aggregator_api import ActionTaken, Report
from core.clock import ManualClock
from core.findings import Action, Status, Verdict
from sim.fakes.nvml import FakeNvml

NODE = "gpu-node-0"


@contextmanager
def disk_full_beyond(size: int) -> Iterator[None]:
    """Files of this process cannot grow past ``size`` bytes (EFBIG), as a full disk refuses more (ENOSPC):
    the write that crosses the line fails and leaves what was written before untouched. Nothing may log to
    a file meanwhile (pytest captures output into one): wrap logging code in ``capture_logs``."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel ends the process
    previous_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, previous_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous_limit)
        signal.signal(signal.SIGXFSZ, previous_handler)


def report(seq: int) -> Report:
    return Report(
        node=NODE,
        seq=seq,
        sent_at=datetime(2026, 3, 1, tzinfo=UTC),
        orchestrator="kubernetes",
        state="healthy",
        verdict=Verdict(node=NODE, status=Status.OK, action=Action.NONE, findings=[]),
    )


def seqs(outbox: ReportOutbox) -> list[int]:
    return [queued.seq for queued in outbox.pending()]


def test_a_full_disk_never_leaves_memory_and_disk_disagreeing(tmp_path: Path) -> None:
    """Two reports fit; 38 more do not. Each failed append raises and leaves memory as the file is."""
    path = tmp_path / "outbox.json"
    outbox = ReportOutbox(path)
    for seq in (1, 2):
        outbox.append(report(seq), heartbeat=False)

    failures = 0
    with disk_full_beyond(path.stat().st_size + 16):
        for seq in range(3, 41):
            try:
                outbox.append(report(seq), heartbeat=False)
            except OutboxError:
                failures += 1

    assert failures == 38
    assert seqs(outbox) == seqs(ReportOutbox(path)) == [1, 2]
    assert outbox.stats().queued == 2


def test_an_acknowledgement_not_written_keeps_the_report_queued_in_memory_as_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "outbox.json"
    outbox = ReportOutbox(path)
    for seq in (1, 2, 3):
        outbox.append(report(seq), heartbeat=False)

    with disk_full_beyond(0), pytest.raises(OutboxError):
        outbox.remove_through(2)

    assert seqs(outbox) == seqs(ReportOutbox(path)) == [1, 2, 3]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    token_file = tmp_path / "token"
    token_file.write_text("t\n")
    settings = AgentSettings(
        node_name=NODE,
        state_dir=tmp_path / "state",
        http=HttpSettings(enabled=False),
        aggregator={"url": "http://127.0.0.1:9", "token_file": token_file},  # never reached: no sender
    )
    clock = ManualClock(start=datetime(2026, 3, 1, tzinfo=UTC))
    built = build_agent(
        settings, library=FakeNvml("h100_sxm", 2, seed=7, node_name=NODE), clock=clock, executor=PerfectNode()
    )
    yield built
    built.close()


def test_actions_of_a_report_that_could_not_be_queued_are_reported_once(agent: Agent) -> None:
    """The report carrying an action fails to reach the disk: the action goes with the next report that
    does, and no report in memory carries it besides (the aggregator would record it twice)."""
    link = agent.parts.link
    assert isinstance(link, AggregatorLink)
    agent.tick()
    outbox_file = link.outbox.path
    diag = ActionTaken(at=datetime(2026, 3, 1, tzinfo=UTC), action="diag", result="ok", message="passed")

    link.note([diag])
    # Logs are captured in memory meanwhile: the test's own captured output is a file too.
    with capture_logs() as logs, disk_full_beyond(outbox_file.stat().st_size + 16):
        agent.tick()
    assert "report_not_queued" in [e["event"] for e in logs]  # the node's pass went on
    agent.tick()

    carrying = [r.seq for r in link.outbox.pending() if any(a.message == "passed" for a in r.actions)]
    assert len(carrying) == 1, carrying
    assert seqs(link.outbox) == seqs(ReportOutbox(outbox_file))


def test_each_corrupt_outbox_is_set_aside_under_its_own_name_counted_and_logged_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox.json"
    path.write_text("{first garbage")
    with capture_logs() as logs:
        first = ReportOutbox(path)
    path.write_text("{second garbage")
    second = ReportOutbox(path)

    kept = sorted(tmp_path.glob("outbox.json.corrupt-*"), key=lambda p: (len(p.name), p.name))
    assert [p.read_text() for p in kept] == ["{first garbage", "{second garbage"]
    assert first.stats().set_aside == 1 and second.stats().set_aside == 1
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["outbox_set_aside"]


def test_the_agents_metrics_count_what_was_set_aside(tmp_path: Path, agent: Agent) -> None:
    """An agent that started on a garbage outbox says so in /metrics (and the queue and drops alongside)."""
    state = tmp_path / "second"
    state.mkdir()
    (state / "outbox.json").write_text("{garbage")
    token_file = tmp_path / "token"
    settings = AgentSettings(
        node_name=NODE,
        state_dir=state,
        http=HttpSettings(enabled=False),
        aggregator={"url": "http://127.0.0.1:9", "token_file": token_file},
    )
    restarted = build_agent(
        settings,
        library=FakeNvml("h100_sxm", 2, seed=7, node_name=NODE),
        clock=ManualClock(start=datetime(2026, 3, 1, tzinfo=UTC)),
        executor=PerfectNode(),
    )
    try:
        registry = restarted.metrics.registry
        assert registry.get_sample_value("gpuhealth_agent_outbox_set_aside_total", {"node": NODE}) == 1
        assert registry.get_sample_value("gpuhealth_agent_outbox_reports", {"node": NODE}) == 0
        restarted.tick()
        assert registry.get_sample_value("gpuhealth_agent_outbox_reports", {"node": NODE}) == 1
        assert registry.get_sample_value("gpuhealth_agent_outbox_dropped_reports_total", {"node": NODE}) == 0
    finally:
        restarted.close()
