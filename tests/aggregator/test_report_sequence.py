"""Reports cannot be poisoned: a node's sequence is its own agent's, a seq far ahead is refused, a new epoch
restarts the sequence, and an agent whose sequence was taken over starts a new epoch instead of going
silent, carrying what the refused report said into the next one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from live_aggregator import LiveAggregator

from agent.loop import TickResult
from agent.uplink.link import AggregatorLink, build_report
from agent.uplink.outbox import ReportOutbox
from core.aggregator_api import MAX_SEQ, ActionTaken, Report
from core.findings import Action, Status, Verdict
from core.health import NodeHealth, NodeState
from core.snapshot import NodeSnapshot
from core.steps import ApplyReport
from tests.aggregator.builders import report
from tests.aggregator.identities import AGENT_NODE, Identities, client_as, start_with_identities

SHARED = "shared-" + "s" * 32
MAX_JUMP = 1_000


def _report(seq: int, epoch: str | None = None) -> Report:
    body = report(AGENT_NODE, seq)
    if epoch is not None:
        body["epoch"] = epoch
    return Report.model_validate(body)


def test_a_seq_far_ahead_is_refused_and_a_new_epoch_restarts_the_sequence(tmp_path: Path) -> None:
    identities = Identities()
    live, _clock = start_with_identities(tmp_path, identities, max_seq_jump=MAX_JUMP)
    try:
        with client_as(live, identities.agent) as agent:
            assert agent.report(_report(100, "boot-a")).accepted
            retry = agent.report(_report(100, "boot-a"))
            assert (retry.accepted, retry.refused, retry.last_seq) == (False, None, 100)

            jump = agent.report(_report(100 + MAX_JUMP + 1, "boot-a"))
            assert not jump.accepted
            assert jump.refused == (
                f"seq {100 + MAX_JUMP + 1} is more than max_seq_jump ({MAX_JUMP}) ahead of node {AGENT_NODE}'s "
                "last accepted seq 100; start a new epoch"
            )
            assert agent.report(_report(100 + MAX_JUMP, "boot-a")).accepted  # within the jump: fine

            restarted = agent.report(_report(5, "boot-b"))
            assert (restarted.accepted, restarted.last_seq) == (True, 5)
        with client_as(live, identities.viewer) as viewer:
            node = viewer.node(AGENT_NODE)
            assert (node.last_seq, node.reports_accepted) == (5, 3)
            assert any(event.kind == "report_epoch" for event in node.timeline)
    finally:
        live.stop()


def _tick(node: str) -> TickResult:
    """One healthy pass of the loop that did nothing."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return TickResult(
        snapshot=NodeSnapshot(node=node, gpus=[]),
        verdict=Verdict(node=node, status=Status.OK, action=Action.NONE, findings=[]),
        health=NodeHealth(
            node=node, state=NodeState.HEALTHY, since=now, reason="AllChecksPassed", message="ok"
        ),
        steps=(),
        report=ApplyReport(),
        seconds=0.0,
    )


def test_an_agent_whose_sequence_was_taken_over_starts_a_new_epoch_and_loses_nothing(tmp_path: Path) -> None:
    """Before per-node identities, anyone with the shared token could push a node's seq to the maximum;
    the node's own agent recovers by itself."""
    identities = Identities()
    live, clock = start_with_identities(tmp_path, identities, token=SHARED)
    try:
        with live.client(SHARED) as attacker:  # the deprecated shared token may still act as any node
            assert attacker.report(_report(MAX_SEQ - 1, "boot-a")).accepted

        outbox = ReportOutbox(tmp_path / "outbox.json")
        link = AggregatorLink(
            AGENT_NODE, client_as(live, identities.agent), outbox, clock=clock, epoch="boot-a"
        )
        drained = ActionTaken(at=clock.now(), action="drain", message="3 pods evicted")
        first = build_report(
            AGENT_NODE,
            outbox.next_seq(1_000),
            clock.now(),
            _tick(AGENT_NODE).health,
            _tick(AGENT_NODE).verdict,
            gpus=[],
            actions=[drained],
            acknowledged=[],
            interval_s=30,
            orchestrator="kubernetes",
            epoch=link.epoch,
        )
        outbox.append(first, heartbeat=False)

        assert link.deliver() == 1
        assert (link.stats.accepted, link.stats.repeated, link.stats.conflicts) == (0, 0, 1)
        assert link.epoch.startswith("boot-a.")
        assert outbox.pending() == []

        queued = link.observe(_tick(AGENT_NODE))
        assert queued is not None
        assert queued.epoch == link.epoch
        assert [action.message for action in queued.actions] == ["3 pods evicted"]  # carried, not lost
        assert link.deliver() == 1
        assert link.stats.accepted == 1
        with client_as(live, identities.viewer) as viewer:
            node = viewer.node(AGENT_NODE)
        assert node.last_seq == queued.seq
        assert any(event.message.startswith("drain ok: 3 pods evicted") for event in node.timeline)
        link.close()
    finally:
        live.stop()


def test_reports_carry_the_labels_the_agent_is_configured_with(tmp_path: Path) -> None:
    identities = Identities()
    live, clock = start_with_identities(tmp_path, identities)
    try:
        labels = {"topology.kubernetes.io/zone": "eu-1a", "rack": "r12", "pool": "training"}
        link = AggregatorLink(
            AGENT_NODE,
            client_as(live, identities.agent),
            ReportOutbox(tmp_path / "outbox.json"),
            clock=clock,
            labels=labels,
        )
        queued = link.observe(_tick(AGENT_NODE))
        assert queued is not None
        assert link.deliver() == 1
        with client_as(live, identities.viewer) as viewer:
            assert viewer.node(AGENT_NODE).labels == labels
        link.close()
    finally:
        live.stop()


def test_a_live_aggregator_keeps_epochs_across_a_restart(tmp_path: Path) -> None:
    identities = Identities()
    live: LiveAggregator
    live, _clock = start_with_identities(tmp_path, identities)
    try:
        with client_as(live, identities.agent) as agent:
            assert agent.report(_report(10, "boot-a")).accepted
        live.stop()
        live.start()
        with client_as(live, identities.agent) as agent:
            again = agent.report(_report(10, "boot-a"))
            assert (again.accepted, again.last_seq) == (False, 10)  # the same epoch: a retry
    finally:
        live.stop()
