"""Least privilege over real HTTP with the real client: every refusal, by HTTP status and by the one line
naming the rule. An agent acts for its own node only; viewers read; operators also quarantine, release, run
diagnostics and silence; admins also reset the breaker and forget nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, Forbidden, Unauthorized
from core.aggregator_api import Report
from core.alerts_api import SilenceCreate
from core.findings import Action
from tests.aggregator.builders import report
from tests.aggregator.identities import (
    AGENT_NODE,
    OTHER_NODE,
    Identities,
    Identity,
    client_as,
    start_with_identities,
)

Call = Callable[[AggregatorClient], Any]


@pytest.fixture(scope="module")
def identities() -> Identities:
    return Identities()


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, identities: Identities
) -> Iterator[tuple[LiveAggregator, int]]:
    """Both nodes reported by their own agents; gpu-node-7 holds permit and has a pending quarantine.
    Yields the aggregator and the permit's id."""
    live, _clock = start_with_identities(tmp_path_factory.mktemp("authz"), identities, budget_min_nodes=2)
    with client_as(live, identities.agent) as agent, client_as(live, identities.other_agent) as other:
        assert agent.report(Report.model_validate(report(AGENT_NODE, 1))).accepted
        assert other.report(
            Report.model_validate(report(OTHER_NODE, 1, "unhealthy", incident="inc-7"))
        ).accepted
        permit = other.request_permit(OTHER_NODE, Action.REBOOT, incident_id="inc-7")
    with client_as(live, identities.operator) as operator:
        operator.quarantine(OTHER_NODE, reason="flaky NVLink")
    yield live, permit.id
    live.stop()


def _own_report(seq: int) -> Report:
    return Report.model_validate(report(AGENT_NODE, seq))


AGENTS_ONLY = "agents may only report, use permits and read their own node and its requests"
OTHER_REPORT = Report.model_validate(report(OTHER_NODE, 99))
REFUSALS: list[tuple[str, str, Callable[[int], Call], str]] = [
    # (who, what, call given the other node's permit id, the rule the 403 names)
    ("agent", "report for another node", lambda _p: lambda c: c.report(OTHER_REPORT),
     f"agent {AGENT_NODE} may only report for its own node, not {OTHER_NODE}"),
    ("agent", "a permit for another node", lambda _p: lambda c: c.request_permit(OTHER_NODE, Action.REBOOT),
     f"agent {AGENT_NODE} may only request permits for its own node, not {OTHER_NODE}"),
    ("agent", "read another node's requests", lambda _p: lambda c: c.pending_requests(OTHER_NODE),
     f"agent {AGENT_NODE} may only read requests for its own node, not {OTHER_NODE}"),
    ("agent", "read another node", lambda _p: lambda c: c.node(OTHER_NODE),
     f"agent {AGENT_NODE} may only read node records for its own node, not {OTHER_NODE}"),
    ("agent", "acknowledge another node's request", lambda _p: lambda c: c.acknowledge_request(OTHER_NODE, 1),
     f"agent {AGENT_NODE} may only acknowledge requests for its own node, not {OTHER_NODE}"),
    ("agent", "read the fleet", lambda _p: lambda c: c.summary(),
     f"agent {AGENT_NODE} may not read the fleet: {AGENTS_ONLY}"),
    ("agent", "read the history", lambda _p: lambda c: c.events(),
     f"agent {AGENT_NODE} may not read the history: {AGENTS_ONLY}"),
    ("agent", "list permits", lambda _p: lambda c: c.permits(),
     f"agent {AGENT_NODE} may not list permits: {AGENTS_ONLY}"),
    ("agent", "quarantine its own node", lambda _p: lambda c: c.quarantine(AGENT_NODE, reason="x"),
     f"agent {AGENT_NODE} may not quarantine a node: {AGENTS_ONLY}"),
    ("agent", "reset the breaker", lambda _p: lambda c: c.breaker_reset(),
     f"agent {AGENT_NODE} may not reset the breaker: {AGENTS_ONLY}"),
    ("agent", "read alerts", lambda _p: lambda c: c.alerts(),
     f"agent {AGENT_NODE} may not read alerts: {AGENTS_ONLY}"),
    ("agent", "forget a node", lambda _p: lambda c: c.forget_node(OTHER_NODE),
     f"agent {AGENT_NODE} may not forget a node: {AGENTS_ONLY}"),
    ("viewer", "report", lambda _p: lambda c: c.report(_own_report(5)),
     "viewer ana may not report: only the node's own agent may"),
    ("viewer", "request a permit", lambda _p: lambda c: c.request_permit(AGENT_NODE, Action.REBOOT),
     "viewer ana may not request permits: only the node's own agent may"),
    ("viewer", "renew a permit", lambda p: lambda c: c.renew_permit(p),
     "viewer ana may not renew permits: only the node's own agent may"),
    ("viewer", "acknowledge a request", lambda _p: lambda c: c.acknowledge_request(OTHER_NODE, 1),
     "viewer ana may not acknowledge requests: only the node's own agent may"),
    ("viewer", "quarantine", lambda _p: lambda c: c.quarantine(OTHER_NODE, reason="x"),
     "viewer ana may not quarantine a node: that needs the operator role"),
    ("viewer", "release", lambda _p: lambda c: c.release(OTHER_NODE, reason="x"),
     "viewer ana may not release a node: that needs the operator role"),
    ("viewer", "diag", lambda _p: lambda c: c.diag(OTHER_NODE, level=1, force=False, reason="x"),
     "viewer ana may not run diagnostics: that needs the operator role"),
    ("viewer", "silence", lambda _p: lambda c: c.silence(
        SilenceCreate(node=OTHER_NODE, duration_s=60, reason="x")),
     "viewer ana may not silence alerts: that needs the operator role"),
    ("viewer", "end a silence", lambda _p: lambda c: c.remove_silence(1),
     "viewer ana may not end silences: that needs the operator role"),
    ("viewer", "retry an alert", lambda _p: lambda c: c.retry_delivery(1),
     "viewer ana may not retry alert deliveries: that needs the operator role"),
    ("viewer", "read the audit log", lambda _p: lambda c: c.audit(),
     "viewer ana may not read the audit log: that needs the operator role"),
    ("viewer", "reset the breaker", lambda _p: lambda c: c.breaker_reset(),
     "viewer ana may not reset the breaker: that needs the admin role"),
    ("operator", "reset the breaker", lambda _p: lambda c: c.breaker_reset(),
     "operator olga may not reset the breaker: that needs the admin role"),
    ("operator", "forget a node", lambda _p: lambda c: c.forget_node(OTHER_NODE),
     "operator olga may not forget a node: that needs the admin role"),
    ("operator", "report", lambda _p: lambda c: c.report(_own_report(6)),
     "operator olga may not report: only the node's own agent may"),
    ("admin", "report", lambda _p: lambda c: c.report(_own_report(7)),
     "admin adam may not report: only the node's own agent may"),
    ("admin", "release a node's permit", lambda p: lambda c: c.release_permit(p),
     "admin adam may not release permits: only the node's own agent may"),
    ("operator", "order a drain", lambda p: lambda c: c.order_drain(p, deadline_s=60),
     "operator olga may not order drains: only the node's own agent may"),
    ("admin", "order a drain", lambda p: lambda c: c.order_drain(p, deadline_s=60),
     "admin adam may not order drains: only the node's own agent may"),
]  # fmt: skip


def _identity(identities: Identities, who: str) -> Identity:
    picked: Identity = getattr(identities, who)
    return picked


Refusal = tuple[str, str, Callable[[int], Call], str]


@pytest.mark.parametrize("case", REFUSALS, ids=[f"{who}: {what}" for who, what, _call, _rule in REFUSALS])
def test_each_refusal_is_a_403_naming_its_rule(
    fleet: tuple[LiveAggregator, int], identities: Identities, case: Refusal
) -> None:
    who, what, call, rule = case
    live, permit_id = fleet
    expected = rule.format(agent=AGENT_NODE, other=OTHER_NODE, permit=permit_id)
    with client_as(live, _identity(identities, who)) as client, pytest.raises(Forbidden) as refused:
        call(permit_id)(client)
    assert str(refused.value) == f"the aggregator refused (HTTP 403): {expected}", what


def test_what_each_identity_may_do_it_can(fleet: tuple[LiveAggregator, int], identities: Identities) -> None:
    live, permit_id = fleet
    with client_as(live, identities.agent) as agent:
        assert agent.report(_own_report(2)).accepted
        assert agent.pending_requests(AGENT_NODE) == []
        assert agent.node(AGENT_NODE).name == AGENT_NODE  # its own record, read back after a lost state file
    with client_as(live, identities.other_agent) as other:
        assert other.renew_permit(permit_id).active
        pending = other.pending_requests(OTHER_NODE)
        assert [(r.kind, r.requested_by) for r in pending] == [("quarantine", "olga")]
    with client_as(live, identities.viewer) as viewer:
        assert viewer.summary().nodes == 2
        assert viewer.pending_requests(OTHER_NODE)[0].kind == "quarantine"
        assert viewer.breaker_status().state == "closed"
    with client_as(live, identities.operator) as operator:
        silence = operator.silence(
            SilenceCreate(node=OTHER_NODE, duration_s=60, reason="cabling", created_by="x")
        )
        assert silence.created_by == "olga"  # the caller, never the body's claim
        assert operator.remove_silence(silence.id).id == silence.id
        assert operator.audit()
    with client_as(live, identities.admin) as admin:
        assert admin.breaker_reset(reason="drill", requested_by="someone-else").reset_by == "adam"


@pytest.mark.parametrize("token", ["", "wrong", "x" * 40], ids=["no token", "short", "unknown"])
def test_a_missing_short_or_unknown_token_is_401(fleet: tuple[LiveAggregator, int], token: str) -> None:
    live, _permit = fleet
    with (
        AggregatorClient(live.url, token or None, retries=1) as client,
        pytest.raises(Unauthorized) as refused,
    ):
        client.summary()
    assert "HTTP 401" in str(refused.value)
    assert not isinstance(refused.value, Forbidden)
    plain = httpx.get(f"{live.url}/v1/fleet", headers={"Authorization": f"Bearer {token}"} if token else {})
    assert (plain.status_code, plain.json()) == (401, {"detail": "missing or wrong bearer token"})


def test_probes_need_no_identity(fleet: tuple[LiveAggregator, int]) -> None:
    live, _permit = fleet
    assert httpx.get(f"{live.url}/healthz").status_code == 200
    assert httpx.get(f"{live.url}/readyz").status_code == 200


def test_every_api_route_declares_who_may_call_it(tmp_path: Path) -> None:
    """A route added without an identity requirement fails here (probes and the API document aside)."""
    from fastapi.routing import APIRoute

    from aggregator.app import create_app
    from aggregator.settings import load_settings

    token = "t" * 32
    app = create_app(load_settings(environ={}, database_url=f"sqlite:///{tmp_path / 'a.db'}", token=token))

    def calls(dependant: Any) -> Iterator[Any]:
        for sub in dependant.dependencies:
            yield sub.call
            yield from calls(sub)

    unguarded = [
        f"{sorted(route.methods or ())} {route.path}"
        for route in app.routes
        if isinstance(route, APIRoute)
        and route.path.startswith("/v1/")
        and not any(getattr(call, "__name__", "") == "caller" for call in calls(route.dependant))
    ]
    assert unguarded == []


def test_refusals_are_logged_once_a_minute_per_address_with_the_rule(tmp_path: Path) -> None:
    """A compromised node probing what it may do cannot flood the aggregator's log."""
    identities = Identities()
    live, _clock = start_with_identities(tmp_path, identities)
    try:
        with structlog.testing.capture_logs() as logs, client_as(live, identities.agent) as agent:
            for _ in range(5):
                with pytest.raises(Forbidden):
                    agent.summary()
    finally:
        live.stop()
    refused = [line for line in logs if line["event"] == "request refused: forbidden"]
    assert [(line["client"], line["reason"]) for line in refused] == [
        ("127.0.0.1", f"agent {AGENT_NODE} may not read the fleet: {AGENTS_ONLY}")
    ]
    assert all(identities.agent.token not in repr(line) for line in logs)
