"""The typed client the agent and the CLI use: answers become models, failures our own exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.uplink.client import (
    AggregatorClient,
    AggregatorUnreachable,
    NotFound,
    PermitLapsed,
    PermitRefused,
    RequestRejected,
    SequenceNumbers,
    Unauthorized,
)
from core.aggregator_api import Report
from core.findings import Action
from tests.aggregator.builders import TOKEN, report
from tests.aggregator.conftest import StartAggregator
from tests.aggregator.postgres import free_port


def test_agent_round_trip_report_permit_renew_release_and_requests(
    start_aggregator: StartAggregator, tmp_path: Path
) -> None:
    live = start_aggregator(
        database_url=f"sqlite:///{tmp_path / 'a.db'}",
        budget_max_nodes=1,
        budget_min_nodes=1,
        permit_settle_s=0,  # the settle wait has its own tests (test_agg_permits, test_link)
    )
    with AggregatorClient(live.url, TOKEN) as client:
        ack = client.report(Report.model_validate(report("node-1", 1, "unhealthy", incident="inc-1")))
        assert ack.accepted
        assert not client.report(Report.model_validate(report("node-1", 1))).accepted
        client.report(Report.model_validate(report("node-2", 1)))

        permit = client.request_permit("node-1", Action.REBOOT, incident_id="inc-1", ttl_s=120)
        assert permit.active
        assert client.renew_permit(permit.id, ttl_s=300).expires_at > permit.expires_at
        with pytest.raises(PermitRefused) as refused:
            client.request_permit("node-2", Action.REBOOT)
        assert refused.value.code == "budget_exhausted"
        assert not client.release_permit(permit.id).active
        with pytest.raises(PermitLapsed):
            client.renew_permit(permit.id)

        request = client.quarantine("node-2", reason="manual test", requested_by="ana")
        assert [r.id for r in client.pending_requests("node-2")] == [request.id]
        assert client.acknowledge_request("node-2", request.id) == []
        assert client.node("node-1").incident is not None
        assert client.incident("inc-1").timeline
        assert [i.id for i in client.incidents(open_only=True)] == ["inc-1"]
        assert client.summary().nodes == 2
        assert [n.name for n in client.nodes(state="unhealthy")] == ["node-1"]
        assert client.events(since="1h", node="node-2")
        assert client.breaker_status().state == "closed"
        assert client.breaker_reset(requested_by="ana").state == "closed"
        with pytest.raises(NotFound):
            client.node("ghost")
        with pytest.raises(RequestRejected):
            client.events(since="yesterday")
    with AggregatorClient(live.url, "wrong") as client, pytest.raises(Unauthorized):
        client.summary()


def test_unreachable_is_retried_for_idempotent_calls_then_raised() -> None:
    sleeps: list[float] = []
    with AggregatorClient(f"http://127.0.0.1:{free_port()}", TOKEN, retries=3, sleep=sleeps.append) as client:
        with pytest.raises(AggregatorUnreachable, match="cannot reach the aggregator"):
            client.report(Report.model_validate(report("node-1", 1)))
        assert len(sleeps) == 2  # three attempts, two waits on the injected sleep
        sleeps.clear()
        with pytest.raises(AggregatorUnreachable):
            client.quarantine("node-1", reason="x", requested_by="y")  # not idempotent: one attempt
        assert sleeps == []


def test_sequence_numbers_keep_increasing_across_restarts_and_within_a_millisecond() -> None:
    now = [1_000.0]
    first = SequenceNumbers(clock=lambda: now[0])
    numbers = [first.next(), first.next()]
    assert numbers == [1_000_000, 1_000_001]
    now[0] = 1_000.5
    restarted = SequenceNumbers(clock=lambda: now[0])  # a new agent process: no stored state
    assert restarted.next() > numbers[-1]
