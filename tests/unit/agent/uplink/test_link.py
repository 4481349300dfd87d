"""The agent's aggregator link: durable outbox, reports on change plus heartbeats, humans' requests, and the
permit gate, against a live aggregator (uvicorn on a free port, SQLite in tmp_path, a token) that shares the
test's manual clock. The node executor is a stateful fake at our own seam."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from executor_defaults import PerfectNode
from live_aggregator import LiveAggregator, free_port
from prometheus_client import generate_latest
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent
from agent.settings import AgentSettings, HttpSettings, aggregator_token
from agent.uplink.client import AggregatorClient
from agent.uplink.link import AggregatorLink
from agent.uplink.outbox import ReportOutbox
from agent.uplink.permit_gate import PermitGate, PermitPurposeError, withhold_unpermitted
from agent.wiring import build_agent
from core.aggregator_api import Report
from core.clock import ManualClock
from core.findings import Action, Status, Verdict
from core.health import NodeState
from core.settings import SettingsError
from core.steps import Cordon, RequestPermit, SetTaint, Step
from sim.fakes.nvml import FakeNvml

NODE = "gpu-node-0"
TOKEN = "unit-test-token-0123456789abcdef0123456789"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=datetime(2026, 3, 1, tzinfo=UTC))


@pytest.fixture
def aggregator(tmp_path: Path, clock: ManualClock) -> Iterator[LiveAggregator]:
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN).start()
    yield live
    live.stop()


@pytest.fixture
def ops(aggregator: LiveAggregator) -> Iterator[AggregatorClient]:
    """On-call's client of the aggregator."""
    with aggregator.client() as client:
        yield client


def make_agent(
    tmp_path: Path, clock: ManualClock, url: str | None, nvml: FakeNvml | None = None, **section: object
) -> Agent:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    settings = AgentSettings(
        node_name=NODE,
        state_dir=tmp_path / "state",
        http=HttpSettings(enabled=False),
        aggregator={"url": url, "token_file": token_file, "heartbeat_s": 60.0, **section},
    )
    library = nvml or FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
    return build_agent(settings, library=library, clock=clock, executor=PerfectNode())


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)


@pytest.fixture
def agent(tmp_path: Path, clock: ManualClock, aggregator: LiveAggregator, nvml: FakeNvml) -> Iterator[Agent]:
    built = make_agent(tmp_path, clock, aggregator.url, nvml)
    yield built
    built.close()


def link_of(agent: Agent) -> AggregatorLink:
    assert agent.parts.link is not None
    return agent.parts.link


def inject_xid(agent: Agent, nvml: FakeNvml, xid: int = 79) -> None:
    """An XID through NVML's event thread; returns once it has woken the loop (as in the runbooks)."""
    assert agent.parts.feed is not None
    agent.parts.feed.ensure_watching()
    agent.wake.clear()
    assert nvml.inject_xid(0, xid)
    assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"


def sample_report(seq: int) -> Report:
    return Report(
        node=NODE,
        seq=seq,
        sent_at=datetime(2026, 3, 1, tzinfo=UTC),
        orchestrator="kubernetes",
        state="healthy",
        verdict=Verdict(node=NODE, status=Status.OK, action=Action.NONE, findings=[]),
    )


# --- the outbox -------------------------------------------------------------------------------------------


def test_outbox_keeps_reports_across_a_restart_and_continues_the_sequence(tmp_path: Path) -> None:
    """Queued reports and the last sequence number survive reopening the file (an agent restart)."""
    outbox = ReportOutbox(tmp_path / "outbox.json")
    first = outbox.next_seq(now_ms=100)
    outbox.append(sample_report(first), heartbeat=False)

    reopened = ReportOutbox(tmp_path / "outbox.json")

    assert [report.seq for report in reopened.pending()] == [100]
    assert reopened.next_seq(now_ms=5) == 101  # a clock gone backwards never repeats a seq


def test_outbox_collapses_heartbeats_but_keeps_every_change(tmp_path: Path) -> None:
    """heartbeat, heartbeat, change, heartbeat, heartbeat -> only the newest of each heartbeat run waits."""
    outbox = ReportOutbox(tmp_path / "outbox.json")
    for seq, heartbeat in [(1, True), (2, True), (3, False), (4, True), (5, True)]:
        outbox.append(sample_report(seq), heartbeat=heartbeat)

    assert [report.seq for report in outbox.pending()] == [2, 3, 5]


def test_outbox_is_bounded_dropping_heartbeats_first(tmp_path: Path) -> None:
    """Past max_reports the oldest heartbeat goes before any change does."""
    outbox = ReportOutbox(tmp_path / "outbox.json", max_reports=3)
    for seq, heartbeat in [(1, False), (2, True), (3, False), (4, False), (5, False)]:
        outbox.append(sample_report(seq), heartbeat=heartbeat)

    assert [report.seq for report in outbox.pending()] == [3, 4, 5]
    assert outbox.stats().dropped == 2


def test_outbox_removes_only_what_was_acknowledged(tmp_path: Path) -> None:
    """remove_through(seq) forgets that report and older ones; newer ones wait."""
    outbox = ReportOutbox(tmp_path / "outbox.json")
    for seq in (1, 2, 3):
        outbox.append(sample_report(seq), heartbeat=False)

    outbox.remove_through(2)

    assert [report.seq for report in ReportOutbox(tmp_path / "outbox.json").pending()] == [3]


def test_a_corrupt_outbox_is_set_aside_and_the_agent_starts_empty(tmp_path: Path) -> None:
    """Garbage in the outbox file does not stop the agent: it is moved aside for a human."""
    path = tmp_path / "outbox.json"
    path.write_text("{not json")

    outbox = ReportOutbox(path)

    assert outbox.pending() == []
    [aside] = tmp_path.glob("outbox.json.corrupt-*")
    assert aside.read_text() == "{not json"


# --- reports ----------------------------------------------------------------------------------------------


def test_a_change_is_queued_on_disk_then_delivered_and_removed(
    agent: Agent, ops: AggregatorClient, clock: ManualClock
) -> None:
    """First pass (unknown -> healthy) is a change: queued before any network call, delivered by deliver(),
    then gone from the outbox; the aggregator shows the node healthy with its 8 GPUs."""
    agent.tick()
    link = link_of(agent)
    assert link.outbox.stats().queued == 1

    assert link.deliver() == 1

    assert link.outbox.stats().queued == 0
    node = ops.node(NODE)
    assert (node.state, len(node.gpus), node.reports_accepted) == ("healthy", 8, 1)


def test_a_steady_node_sends_a_heartbeat_every_heartbeat_s_only(agent: Agent, clock: ManualClock) -> None:
    """Ticks every 10 s over 3 minutes with nothing changing: one change report, then one heartbeat per
    60 s (each delivered, so none collapses)."""
    link = link_of(agent)
    agent.tick()
    link.deliver()
    for _ in range(18):
        clock.advance(10)
        agent.tick()
        link.deliver()

    assert link.stats.accepted == 4  # the first change + heartbeats at 60, 120 and 180 s


def test_an_xid_is_reported_at_once_with_the_incident_and_the_steps_applied(
    agent: Agent, ops: AggregatorClient, clock: ManualClock, nvml: FakeNvml
) -> None:
    """XID 79 -> an unhealthy report right away (no heartbeat wait), carrying the incident and the taint
    in its actions; the aggregator opens the incident."""
    link = link_of(agent)
    agent.tick()
    link.deliver()
    inject_xid(agent, nvml)
    clock.advance(1)
    result = agent.tick()
    report = link.outbox.pending()[-1]

    link.deliver()

    assert result.health.incident is not None
    assert report.incident is not None and report.incident.id == result.health.incident.id
    assert "taint" in [action.action for action in report.actions]
    node = ops.node(NODE)
    assert node.state == "unhealthy"
    assert node.incident is not None and node.incident.id == result.health.incident.id


def test_the_sender_thread_delivers_without_being_asked(agent: Agent, ops: AggregatorClient) -> None:
    """With the sender running, a queued report reaches the aggregator on its own (no deliver() call)."""
    link = link_of(agent)
    link.start()
    try:
        agent.tick()
        wait_until(lambda: link.stats.accepted != 0)
    finally:
        link.stop()

    assert link.outbox.stats().queued == 0
    assert ops.node(NODE).reports_accepted == 1


def test_a_dry_run_reports_its_planned_steps_as_dry_run(
    tmp_path: Path, clock: ManualClock, aggregator: LiveAggregator
) -> None:
    """--dry-run still reports (it plans and reports everything) but marks each step dry_run."""
    settings = AgentSettings(
        node_name=NODE,
        state_dir=tmp_path / "state",
        dry_run=True,
        http=HttpSettings(enabled=False),
        aggregator={"url": aggregator.url},
    )
    nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
    agent = build_agent(settings, library=nvml, clock=clock, executor=PerfectNode())
    try:
        agent.tick()
        report = link_of(agent).outbox.pending()[-1]
    finally:
        agent.close()

    assert report.actions and {action.result for action in report.actions} == {"dry_run"}


def test_a_hanging_aggregator_never_delays_the_taint(tmp_path: Path, clock: ManualClock) -> None:
    """The aggregator accepts connections and never answers: with the sender thread running, an XID pass
    still applies the taint at once and the report waits in the outbox."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
        agent = make_agent(tmp_path, clock, url, nvml, timeout_s=30.0)
        link = link_of(agent)
        try:
            agent.tick()
            link.start()
            inject_xid(agent, nvml)
            started = time.perf_counter()
            result = agent.tick()
            seconds = time.perf_counter() - started
        finally:
            link.stop(timeout=0.1)
            agent.close()

    assert any(isinstance(step, SetTaint) for step in result.steps)
    assert seconds < 2.0  # a 30 s aggregator timeout would show here if the loop waited for it
    assert link.outbox.stats().queued == 2


# --- the humans' requests ---------------------------------------------------------------------------------


def test_quarantine_and_release_requests_are_applied_and_acknowledged(
    agent: Agent, ops: AggregatorClient, clock: ManualClock
) -> None:
    """gpuhealth quarantine -> the next ack carries the request -> the next pass quarantines (taint
    replace) and its report acknowledges it; gpuhealth release -> released, acknowledged too."""
    link = link_of(agent)
    agent.tick()
    link.deliver()
    ops.quarantine(NODE, reason="flaky NVLink", requested_by="alice")
    clock.advance(60)
    agent.tick()
    link.deliver()  # the heartbeat's ack brings the request

    quarantined = agent.tick()
    link.deliver()

    assert quarantined.health.state is NodeState.QUARANTINED
    assert agent.parts.executor.facts().taint_value == "replace"
    assert ops.pending_requests(NODE) == []
    ops.release(NODE, reason="cable reseated", requested_by="alice")
    clock.advance(60)
    agent.tick()
    link.deliver()
    released = agent.tick()
    link.deliver()
    assert released.health.state is NodeState.HEALTHY
    assert agent.parts.executor.facts().taint_value is None
    assert ops.pending_requests(NODE) == []


# --- permits ----------------------------------------------------------------------------------------------


def test_without_an_aggregator_no_permit_is_ever_granted(tmp_path: Path, clock: ManualClock) -> None:
    """No aggregator URL -> no link, and a gate that answers None: mark + taint only."""
    agent = make_agent(tmp_path, clock, None)
    try:
        assert agent.parts.link is None
        assert agent.parts.permits is not None
        assert agent.parts.permits.acquire("drain", "inc-1") is None
    finally:
        agent.close()


def test_an_unreachable_aggregator_grants_nothing(clock: ManualClock) -> None:
    """Connection refused -> None, not an exception."""
    client = AggregatorClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout_s=1.0, retries=1)
    with client:
        assert PermitGate(NODE, client, clock=clock).acquire("reboot", "inc-1") is None


def test_a_permit_is_granted_kept_renewed_and_released_with_its_incident(
    agent: Agent, ops: AggregatorClient, aggregator: LiveAggregator, clock: ManualClock
) -> None:
    """Granted once; asked again -> the same permit; past half its TTL -> renewed (later expiry); the
    incident closes -> released on the aggregator."""
    agent.tick()
    link_of(agent).deliver()  # the aggregator must know the node
    with aggregator.client() as client:
        gate = PermitGate(NODE, client, clock=clock, ttl_s=100.0)
        permit = gate.acquire("reboot", "inc-1")
        assert permit is not None and permit.active
        assert gate.acquire("reboot", "inc-1") == permit
        clock.advance(60)
        renewed = gate.acquire("reboot", "inc-1")
        assert renewed is not None and renewed.id == permit.id and renewed.expires_at > permit.expires_at

        gate.observe_incident(None)

    assert gate.held is None
    detail = ops.node(NODE)
    assert detail.permit is None or not detail.permit.active


def test_a_refused_permit_is_asked_again_only_after_retry_s(
    aggregator: LiveAggregator, ops: AggregatorClient, clock: ManualClock
) -> None:
    """A node the aggregator does not know is refused (unknown_node); a second acquire within retry_s does
    not ask again (one refusal in the history), one after retry_s does."""
    with aggregator.client() as client:
        gate = PermitGate(NODE, client, clock=clock, retry_s=30.0)
        assert gate.acquire("drain", "inc-1") is None
        assert gate.acquire("drain", "inc-1") is None
        refusals_before = sum(1 for event in ops.events() if event.kind == "permit_refused")
        clock.advance(31)
        assert gate.acquire("drain", "inc-1") is None

    refusals = sum(1 for event in ops.events() if event.kind == "permit_refused")
    assert (refusals_before, refusals) == (1, 2)


def test_a_permit_for_a_non_remediation_is_a_clear_error(clock: ManualClock) -> None:
    with pytest.raises(PermitPurposeError, match="no permit exists for 'taint'"):
        PermitGate(NODE, None, clock=clock).acquire("taint", "inc-1")


def test_steps_after_a_request_permit_are_withheld_without_a_permit(clock: ManualClock) -> None:
    """[taint, RequestPermit, cordon] with no permit -> the taint only; the RequestPermit never reaches
    the executor."""
    steps: list[Step] = [
        SetTaint(value="reboot"),
        RequestPermit(purpose="drain", incident_id="inc-1"),
        Cordon(),
    ]

    allowed, notes = withhold_unpermitted(steps, PermitGate(NODE, None, clock=clock))

    assert allowed == [SetTaint(value="reboot")]
    assert notes == ["no permit for drain (inc-1): withheld 1 steps"]


def test_steps_after_a_granted_permit_go_ahead(
    agent: Agent, aggregator: LiveAggregator, clock: ManualClock
) -> None:
    agent.tick()
    link_of(agent).deliver()
    steps: list[Step] = [
        SetTaint(value="reboot"),
        RequestPermit(purpose="drain", incident_id="inc-1"),
        Cordon(),
    ]
    with aggregator.client() as client:
        allowed, notes = withhold_unpermitted(steps, PermitGate(NODE, client, clock=clock))

    assert (allowed, notes) == ([SetTaint(value="reboot"), Cordon()], [])


def test_a_reboot_incidents_drain_asks_for_a_reboot_permit(
    agent: Agent, aggregator: LiveAggregator, ops: AggregatorClient, clock: ManualClock
) -> None:
    """The permit names the incident's remedy, not drain_and_reset: the history says what the node is out for."""
    agent.tick()
    link_of(agent).deliver()
    steps: list[Step] = [RequestPermit(purpose="drain", incident_id="inc-1", action=Action.REBOOT), Cordon()]
    with aggregator.client() as client:
        withhold_unpermitted(steps, PermitGate(NODE, client, clock=clock))
    [granted] = [event for event in ops.events() if event.kind == "permit_granted"]
    assert granted.details["action"] == "reboot" and "for reboot granted" in granted.message


# --- settings ---------------------------------------------------------------------------------------------


def test_the_token_comes_from_the_environment_before_the_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    section = AgentSettings(aggregator={"url": "http://x", "token_file": token_file}).aggregator

    assert aggregator_token(section, {"GPUHEALTH_AGGREGATOR_TOKEN": "from-env"}) == "from-env"
    assert aggregator_token(section, {}) == "from-file"


def test_an_unreadable_token_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    section = AgentSettings(aggregator={"url": "http://x", "token_file": tmp_path / "missing"}).aggregator

    with pytest.raises(SettingsError, match=r"missing: cannot read the token file"):
        aggregator_token(section, {})


def test_a_report_refused_for_good_is_set_aside_and_the_next_ones_still_go(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A 413 (the report is larger than the aggregator takes) can never succeed: the report is written aside
    with the reason, counted in /metrics, and the reports behind it are delivered instead of waiting forever."""
    # 8 KiB: an 8-GPU report with its peer readings fits (about 5 KiB), the 100 long labels do not.
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN, max_report_bytes=8192).start()
    try:
        agent = make_agent(tmp_path, clock, live.url)
        link = link_of(agent)
        agent.tick()  # a normal first report, queued
        [first] = link.outbox.pending()
        huge = first.model_copy(
            update={"seq": first.seq + 1, "labels": {f"k{i}": "v" * 60 for i in range(100)}}
        )
        normal = first.model_copy(update={"seq": first.seq + 2})
        link.outbox.remove_through(first.seq)
        link.outbox.append(huge, heartbeat=False)
        link.outbox.append(normal, heartbeat=False)

        assert link.deliver() == 1

        assert link.outbox.pending() == []
        assert link.outbox.stats().rejected == 1
        [aside] = tmp_path.glob("state/outbox.json.rejected-*")
        letter = json.loads(aside.read_text())
        assert letter["report"]["seq"] == huge.seq and "413" in letter["reason"]
        with live.client() as ops:
            assert ops.node(NODE).last_seq == normal.seq
        metrics = generate_latest(agent.metrics.registry).decode()
        assert f'gpuhealth_agent_outbox_rejected_reports_total{{node="{NODE}"}} 1.0' in metrics
        agent.close()
    finally:
        live.stop()


def test_a_settling_node_is_told_when_to_ask_again_and_the_loop_wakes_then(
    tmp_path: Path, clock: ManualClock, nvml: FakeNvml
) -> None:
    """XID 79: the aggregator answers ``settling`` with the seconds left; the gate asks again after those
    (not after its whole retry_s) and the loop's next wait is that short, then the permit is granted."""
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN, permit_settle_s=15.0).start()
    agent = make_agent(tmp_path, clock, live.url, nvml, permit_retry_s=60.0)
    agent.interval_s = 30.0
    try:
        agent.tick()
        link_of(agent).deliver()  # the aggregator knows the node
        inject_xid(agent, nvml)
        clock.advance(1)
        incident = agent.tick().health.incident
        assert incident is not None
        link_of(agent).deliver()
        gate = agent.parts.permits  # the gate the loop consults for its next wake
        assert gate is not None
        assert gate.acquire("drain", incident.id) is None
        assert gate.wake_in() == pytest.approx(15.0, abs=0.5)
        assert agent.next_wait_s() == pytest.approx(15.0, abs=0.5)  # not the 60 s retry, not the interval
        clock.advance(15.5)
        assert gate.wake_in() == 0.0  # the said time passed with no ask since: due now, once
        assert gate.wake_in() is None
        assert agent.next_wait_s() == agent.interval_s
        assert gate.acquire("drain", incident.id) is not None
    finally:
        agent.close()
        live.stop()


def test_an_ask_refused_again_with_a_moment_left_is_made_at_once_not_an_interval_later(
    tmp_path: Path, clock: ManualClock, nvml: FakeNvml
) -> None:
    """The pass asks before its report arrives, so the aggregator's settle counts from a little later than
    the first ask: the ask at the said time is refused once more with that moment left, which is past by the
    end of the pass. The loop must wake at once, not a whole interval later (on a fleet of 5,000 nodes every
    other drain of the benchmark waited out its interval, and a node whose fault had cleared was released
    before it was ever drained)."""
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN, permit_settle_s=15.0).start()
    agent = make_agent(tmp_path, clock, live.url, nvml, permit_retry_s=60.0)
    agent.interval_s = 60.0
    try:
        agent.tick()
        link_of(agent).deliver()
        inject_xid(agent, nvml)
        clock.advance(1)
        incident = agent.tick().health.incident
        assert incident is not None
        gate = agent.parts.permits
        assert gate is not None
        assert gate.acquire("drain", incident.id) is None  # before the report: refused, the whole 15 s
        assert agent.next_wait_s() == pytest.approx(15.0, abs=0.1)
        clock.advance(0.4)
        link_of(agent).deliver()  # the report: the aggregator's settle counts from here
        clock.advance(14.7)
        assert gate.acquire("drain", incident.id) is None  # refused again: 0.3 s left
        clock.advance(0.5)  # the rest of the pass
        assert agent.next_wait_s() == 0.0
        assert gate.acquire("drain", incident.id) is not None
    finally:
        agent.close()
        live.stop()
