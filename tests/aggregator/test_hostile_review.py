"""What a hostile review of the aggregator got through (issue 27), each over real HTTP against a running
aggregator with per-node identities, as it was reproduced: every attack here is now refused or harmless.
docs/security.md names each test in its threat model."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, NotFound, PermitRefused
from core.aggregator_api import Report
from core.clock import ManualClock
from core.findings import Action
from tests.aggregator.builders import TOKEN, report
from tests.aggregator.identities import (
    AGENT_NODE,
    OTHER_NODE,
    Identities,
    client_as,
    start_with_identities,
)

ATTACKER = AGENT_NODE  # a compromised node: root on it, with its agent's token
VICTIM = OTHER_NODE
AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def identities() -> Identities:
    return Identities()


@pytest.fixture
def live(tmp_path: Path, identities: Identities) -> Iterator[tuple[LiveAggregator, ManualClock]]:
    started = start_with_identities(tmp_path, identities, budget_min_nodes=2)
    yield started
    started[0].stop()


def _send(client: AggregatorClient, node: str, seq: int, state: str = "healthy", **kwargs: Any) -> None:
    assert client.report(Report.model_validate(report(node, seq, state, **kwargs))).accepted


def _forged_action(incident_id: str) -> dict[str, Any]:
    return {
        "at": AT.isoformat(),
        "action": "reboot",
        "result": "ok",
        "message": "forged",
        "incident_id": incident_id,
    }


# -- item 2: a node writes into another node's incident -------------------------------------------------------


def test_an_action_naming_another_nodes_incident_stays_out_of_its_timeline(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        _send(bad, ATTACKER, 1, actions=[_forged_action("inc-victim")])
    with client_as(aggregator, identities.viewer) as viewer:
        timeline = viewer.incident("inc-victim").timeline
        attackers = [event for event in viewer.events(node=ATTACKER) if event.kind == "action"]
    assert [event.node for event in timeline if event.node != VICTIM] == []
    assert [(event.message, event.incident_id) for event in attackers] == [("reboot ok: forged", None)]


def test_a_permit_request_naming_another_nodes_incident_leaves_nothing_there(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        _send(bad, ATTACKER, 1)
        granted = bad.request_permit(ATTACKER, Action.REBOOT, incident_id="inc-victim")
        bad.release_permit(granted.id)
        with pytest.raises(PermitRefused):  # in cooldown now: the refusal is an event too
            bad.request_permit(ATTACKER, Action.REBOOT, incident_id="inc-victim")
    with client_as(aggregator, identities.viewer) as viewer:
        timeline = viewer.incident("inc-victim").timeline
        permit_events = [e for e in viewer.events(node=ATTACKER) if e.kind.startswith("permit_")]
    assert granted.incident_id is None
    assert [event.kind for event in timeline if event.node != VICTIM] == []
    assert {event.kind for event in permit_events} == {"permit_granted", "permit_released", "permit_refused"}
    assert all(event.incident_id is None for event in permit_events)


# -- item 3: incident ids are scoped to their node ------------------------------------------------------------


def test_an_incident_id_taken_first_by_another_node_does_not_hide_the_real_incident(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.agent) as bad,
        client_as(aggregator, identities.other_agent) as victim,
    ):
        _send(victim, VICTIM, 1)
        _send(bad, ATTACKER, 1, "unhealthy", incident="inc-victim-next")  # the victim's id, used first
        _send(victim, VICTIM, 2, "unhealthy", incident="inc-victim-next")
        _send(victim, VICTIM, 3, "unhealthy", incident="inc-victim-next")  # the same incident, not a new one
        own = victim.node(VICTIM).incident
        permit = victim.request_permit(VICTIM, Action.REBOOT, incident_id="inc-victim-next")
    assert own is not None and own.node == VICTIM and own.open
    assert own.id.startswith("inc-victim-next~") and len(own.id) <= 128
    assert permit.incident_id == own.id  # the victim's permit is for its own incident
    with client_as(aggregator, identities.viewer) as viewer:
        opened = [e for e in viewer.events(node=VICTIM) if e.kind == "incident_opened"]
        alerts = [a for a in viewer.alerts() if a.kind == "incident_opened" and a.node == VICTIM]
        detail = viewer.incident(own.id)
    assert [event.incident_id for event in opened] == [own.id]
    assert [alert.incident_id for alert in alerts] == [own.id]
    assert detail.node == VICTIM and detail.timeline


def test_agents_make_incident_ids_no_other_node_can_guess() -> None:
    from agent.state.machine import default_incident_id

    ids = {default_incident_id("gpu-node-7", AT) for _ in range(64)}
    assert len(ids) == 64
    assert all(len(one.rsplit("-", 1)[1]) == 16 for one in ids)  # 64 random bits


# -- item 4: permit and drain ids reveal nothing about other nodes ---------------------------------------------

PERMIT_CALLS: dict[str, Callable[[AggregatorClient, int], object]] = {
    "renew": lambda c, p: c.renew_permit(p),
    "release": lambda c, p: c.release_permit(p),
    "order a drain": lambda c, p: c.order_drain(p, deadline_s=60),
    "read the drain": lambda c, p: c.drain_of(p),
}


@pytest.mark.parametrize("what", PERMIT_CALLS)
def test_another_nodes_permit_answers_as_if_it_did_not_exist(
    live: tuple[LiveAggregator, ManualClock], identities: Identities, what: str
) -> None:
    aggregator, _clock = live
    call = PERMIT_CALLS[what]
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        _send(bad, ATTACKER, 1)
        held = victim.request_permit(VICTIM, Action.REBOOT, incident_id="inc-victim").id
        answers = []
        for permit_id in (held, held + 1000):  # the victim's, and one that does not exist
            with pytest.raises(NotFound) as refused:
                call(bad, permit_id)
            answers.append(str(refused.value).replace(str(permit_id), "N"))
        assert victim.renew_permit(held).active  # untouched
    assert answers[0] == answers[1]
    assert VICTIM not in answers[0]


# -- item 5: pagination tokens ----------------------------------------------------------------------------------


def _token(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")


BAD_TOKENS = {
    "huge id": ("/v1/events", _token(f'["2026-01-01T00:00:00+00:00",{2**70}]')),
    "negative id": ("/v1/events", _token('["2026-01-01T00:00:00+00:00",-1]')),
    "non-integer id": ("/v1/events", _token('["2026-01-01T00:00:00+00:00",1.5]')),
    "id as text": ("/v1/events", _token('["2026-01-01T00:00:00+00:00","1"]')),
    "naive time": ("/v1/events", _token('["2026-01-01T00:00:00",1]')),
    "lone surrogate time": ("/v1/events", _token('["\\ud800",1]')),
    "nested": ("/v1/events", _token("[[[[1]]],1]")),
    "lone surrogate node": ("/v1/nodes", _token('["\\ud800"]')),
    "node as number": ("/v1/nodes", _token(f"[{2**70}]")),
    "not a node name": ("/v1/nodes", _token('["a b"]')),
    "not base64": ("/v1/nodes", "%%%"),
    "not a list": ("/v1/nodes", _token('{"a":1}')),
}


@pytest.mark.parametrize("case", BAD_TOKENS)
def test_a_bad_continue_token_is_a_400_for_a_viewer(
    live: tuple[LiveAggregator, ManualClock], identities: Identities, case: str
) -> None:
    aggregator, _clock = live
    path, token = BAD_TOKENS[case]
    with client_as(aggregator, identities.agent) as agent:
        _send(agent, ATTACKER, 1)
    answer = httpx.get(
        f"{aggregator.url}{path}",
        params={"continue": token, "limit": 1},
        headers={"Authorization": f"Bearer {identities.viewer.token}"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith("continue: not ")
    assert httpx.get(f"{aggregator.url}/healthz").status_code == 200


# -- item 6: the request head is bounded before authentication ----------------------------------------------------


def _stream_header(url: str, megabytes: int, sent: list[int]) -> None:
    """An unauthenticated client sending one header of ``megabytes``; how much it got to send lands in
    ``sent`` (the aggregator closes the connection on it once the head passes its bound)."""
    host, port = url.removeprefix("http://").split(":")
    total = 0
    with socket.create_connection((host, int(port)), timeout=10) as attacker:
        attacker.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ")
        try:
            for _ in range(megabytes * 16):
                attacker.sendall(b"a" * 65536)
                total += 65536
        except OSError:
            pass  # refused and closed: the rest is never read
    sent.append(total)


def test_a_64_mb_header_is_refused_early_and_never_stalls_other_requests(
    live: tuple[LiveAggregator, ManualClock],
) -> None:
    aggregator, _clock = live
    sent: list[int] = []
    flood = threading.Thread(target=_stream_header, args=(aggregator.url, 64, sent))
    flood.start()
    slowest = 0.0
    while flood.is_alive():
        started = time.monotonic()
        assert httpx.get(f"{aggregator.url}/healthz", timeout=10).status_code == 200
        slowest = max(slowest, time.monotonic() - started)
    flood.join()
    assert slowest < 1.0
    assert sent[0] < 32 * 2**20  # cut off long before the 64 MB (what it sent went into socket buffers)


@pytest.mark.parametrize(
    "headers",
    [{"X-Big": "a" * 40_000}, {f"X-H{i}": "v" for i in range(150)}],
    ids=["one header over max_header_bytes", "more headers than max_headers"],
)
def test_an_over_large_head_is_a_431(
    live: tuple[LiveAggregator, ManualClock], headers: dict[str, str]
) -> None:
    aggregator, _clock = live
    answer = httpx.get(f"{aggregator.url}/healthz", headers=headers)
    assert answer.status_code == 431


def test_a_head_within_the_bounds_is_served(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    headers = {"Authorization": f"Bearer {identities.viewer.token}", "X-Trace": "t" * 8000}
    headers |= {f"X-H{i}": "v" for i in range(80)}
    assert httpx.get(f"{aggregator.url}/v1/fleet", headers=headers).status_code == 200


# -- item 7: terminal control sequences from a node never reach on-call's terminal -----------------------------

HOSTILE_TEXT = "ok\x1b[2K\x1b[1A\x1b]0;owned\x07\x9b31m\u202eevil\r\n"


def _cli(aggregator: LiveAggregator, token: str, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUHEALTH_")}
    env |= {
        "NO_COLOR": "1",
        "COLUMNS": "300",
        "GPUHEALTH_AGGREGATOR_URL": aggregator.url,
        "GPUHEALTH_TOKEN": token,
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "gpuhealth"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_control_sequences_in_findings_and_actions_are_printed_escaped(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    body = report(ATTACKER, 1, "unhealthy", incident="inc-attacker", actions=[_forged_action("x")])
    body["verdict"]["findings"][0]["message"] = HOSTILE_TEXT
    body["actions"][0]["message"] = HOSTILE_TEXT
    with client_as(aggregator, identities.agent) as bad:
        assert bad.report(Report.model_validate(body)).accepted
    shown = _cli(aggregator, identities.viewer.token, "node", ATTACKER) + _cli(
        aggregator, identities.viewer.token, "events", "--node", ATTACKER
    )
    assert not any(char in shown for char in "\x1b\x07\x9b\u202e\r")
    assert shown.count("ok\\x1b[2K\\x1b[1A\\x1b]0;owned\\x07\\x9b31m\\u202eevil\\x0d\\x0a") >= 2


def test_the_fleet_page_writes_text_as_text() -> None:
    """The page puts what it reads into the document as text nodes only, never as HTML."""
    script = (Path(__file__).parents[2] / "aggregator" / "ui" / "app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
    assert "textContent" in script


# -- item 8: every string of a report is bounded ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "size"), [("message", 900_000), ("check", 65), ("code", 129), ("gpu", 129)]
)
def test_over_long_finding_text_is_refused_and_never_stored(
    live: tuple[LiveAggregator, ManualClock], identities: Identities, field: str, size: int
) -> None:
    aggregator, _clock = live
    body = report(ATTACKER, 1, "unhealthy")
    body["verdict"]["findings"][0][field] = "x" * size
    answer = httpx.post(
        f"{aggregator.url}/v1/reports",
        json=body,
        headers={"Authorization": f"Bearer {identities.agent.token}"},
    )
    assert answer.status_code == 422
    assert f"verdict.findings[0].{field}" in answer.text
    assert len(answer.content) < 2000  # the input is not echoed back
    with client_as(aggregator, identities.viewer) as viewer:
        assert viewer.events(node=ATTACKER) == []


def test_the_agent_clips_what_it_reports_to_those_bounds() -> None:
    from core.aggregator_api import FINDING_TEXT_LIMITS, reportable_finding
    from core.findings import Finding, Status

    long = Finding(check="c" * 99, gpu="g" * 200, status=Status.FAIL, code="X" * 200, message="m" * 5000,
                   action=Action.REBOOT)  # fmt: skip
    clipped = reportable_finding(long)
    assert {name: len(getattr(clipped, name)) for name in FINDING_TEXT_LIMITS} == FINDING_TEXT_LIMITS


# -- item 9: one node cannot flood the history -------------------------------------------------------------------


def _actions(count: int, at: datetime = AT) -> list[dict[str, Any]]:
    return [
        {"at": at.isoformat(), "action": "reset", "result": "failed", "message": f"try {i}"}
        for i in range(count)
    ]


def test_one_nodes_flood_of_actions_is_bounded_and_summarised_not_silently_dropped(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, clock = live
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        for seq in range(1, 7):  # 1,200 actions within a minute
            _send(bad, ATTACKER, seq, "unhealthy", incident="inc-flood", actions=_actions(200))
        with client_as(aggregator, identities.viewer) as viewer:
            rows = viewer.events(node=ATTACKER, limit=1000)
            page = viewer.events()
        written = [row for row in rows if row.kind == "action"]
        summaries = [row for row in rows if row.kind == "history_limited"]
        unbounded = {"history_limited", "incident_opened", "turned_unhealthy"}
        assert len([row for row in rows if row.kind not in unbounded]) == 120
        assert len(summaries) == 1  # one row per node and minute, brought up to date
        assert summaries[0].details["held_back"] == 1200 - len(written)
        assert summaries[0].details["incidents"] == ["inc-flood"]
        assert any(event.node == VICTIM for event in page)  # the others still show on the default page
        assert any(row.kind == "incident_opened" for row in rows)  # the fleet rules' rows are never held back
        clock.advance(61)
        _send(bad, ATTACKER, 7, "unhealthy", incident="inc-flood", actions=_actions(1))
    with client_as(aggregator, identities.viewer) as viewer:
        assert [row.message for row in viewer.events(node=ATTACKER, limit=1000) if row.kind == "action"][
            -1
        ] == ("reset failed: try 0")


def test_an_action_dated_in_the_future_cannot_stay_on_top_of_the_history(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, clock = live
    with client_as(aggregator, identities.agent) as bad:
        _send(bad, ATTACKER, 1, actions=_actions(1, at=datetime(8000, 1, 1, tzinfo=UTC)))
    with client_as(aggregator, identities.viewer) as viewer:
        action = next(row for row in viewer.events(node=ATTACKER) if row.kind == "action")
    assert action.at <= clock.now()


# -- item 10: X-Forwarded-For only from configured proxies ----------------------------------------------------------


def _audited_client(aggregator: LiveAggregator, identities: Identities) -> str:
    """Quarantine a node as the operator, claiming another address; the address the audit log records."""
    answer = httpx.post(
        f"{aggregator.url}/v1/nodes/{VICTIM}/quarantine",
        json={"reason": "check the claimed address"},
        headers={"Authorization": f"Bearer {identities.operator.token}", "X-Forwarded-For": "203.0.113.9"},
    )
    assert answer.status_code == 201, answer.text
    with client_as(aggregator, identities.operator) as operator:
        return next(entry.client for entry in operator.audit() if entry.action == "quarantine")


def test_a_caller_on_the_same_host_cannot_put_another_address_in_the_audit_log(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with client_as(aggregator, identities.other_agent) as victim:
        _send(victim, VICTIM, 1)
    assert _audited_client(aggregator, identities) == "127.0.0.1"


def test_a_configured_proxy_is_believed(tmp_path: Path, identities: Identities) -> None:
    aggregator, _clock = start_with_identities(tmp_path, identities, trusted_proxies=["127.0.0.0/8"])
    try:
        with client_as(aggregator, identities.other_agent) as victim:
            _send(victim, VICTIM, 1)
        assert _audited_client(aggregator, identities) == "203.0.113.9"
    finally:
        aggregator.stop()


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    from aggregator.settings import load_settings
    from core.settings import SettingsError

    def settings(proxies: str) -> list[str]:
        environ = {"GPUHEALTH_AGGREGATOR_TRUSTED_PROXIES": proxies}
        return load_settings(environ=environ, token=TOKEN).trusted_proxies

    with pytest.raises(SettingsError, match="not an IP address or network"):
        settings("10.0.0.0/8,proxy.example")
    assert settings("10.0.0.0/8, ::1") == ["10.0.0.0/8", "::1"]
    assert load_settings(environ={}, token=TOKEN).trusted_proxies == []  # none believed by default


# -- item 11: authentication's smaller holes -------------------------------------------------------------------


def test_a_persons_id_token_is_never_sent_to_the_kubernetes_api(tmp_path: Path) -> None:
    from sim.kube.harness import KubeSim
    from tests.aggregator.oidc_issuer import OidcIssuer

    kube, issuer = KubeSim(controllers=False).start(), OidcIssuer().start()
    (tmp_path / "sa-token").write_text("aggregator-service-account-token\n")
    aggregator = LiveAggregator(
        tmp_path / "aggregator.db",
        ManualClock(start=AT),
        None,
        kubernetes_api_url=kube.url,
        kubernetes_audience="gpuhealth-aggregator",
        kubernetes_agent_service_accounts=["system:serviceaccount:gpuhealth:gpuhealth-agent"],
        kubernetes_token_file=tmp_path / "sa-token",
        oidc_issuer=issuer.url,
        oidc_role_map={"gpu-viewers": "viewer"},
    ).start()
    try:
        no_role = issuer.id_token("sam@example.com", ["sales"])  # refused by OIDC: falls through the chain
        answer = httpx.get(f"{aggregator.url}/v1/fleet", headers={"Authorization": f"Bearer {no_role}"})
        assert answer.status_code == 401
        assert kube.token_reviews.reviews == 0
    finally:
        aggregator.stop()
        issuer.stop()
        kube.stop()


def test_a_flood_of_made_up_tokens_does_not_evict_the_agents_answers() -> None:
    from aggregator.auth.answer_cache import AnswerCache
    from aggregator.auth.principal import AuthMethod, Principal, Role

    cache = AnswerCache(lambda: 0.0, max_entries=10)
    agent = Principal(name=VICTIM, role=Role.AGENT, method=AuthMethod.KUBERNETES, node=VICTIM)
    cache.put("the agent's token", agent, until=60.0)
    for number in range(1000):
        cache.put(f"made-up token {number}", None, until=10.0)
    assert cache.get("the agent's token") == agent


def test_a_down_oidc_issuer_is_asked_once_not_on_every_request(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class Down(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(503)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            return

    down = ThreadingHTTPServer(("127.0.0.1", 0), Down)
    threading.Thread(target=down.serve_forever, daemon=True).start()
    issuer_url = f"http://127.0.0.1:{down.server_address[1]}"
    aggregator = LiveAggregator(
        tmp_path / "aggregator.db", ManualClock(start=AT), None, oidc_issuer=issuer_url,
        oidc_role_map={"gpu-viewers": "viewer"},
    ).start()  # fmt: skip
    token = _token('{"alg":"RS256"}') + "." + _token('{"iss":"' + issuer_url + '"}') + ".c2ln"
    try:
        for _ in range(5):
            answer = httpx.get(f"{aggregator.url}/v1/fleet", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 401
    finally:
        aggregator.stop()
        down.shutdown()
    assert asked == ["/.well-known/openid-configuration"]


def test_pyjwt_is_pinned_to_the_jwks_refresh_cooldown_the_clients_use() -> None:
    import tomllib

    import jwt

    from aggregator.auth.nomad import NomadIdentityAuthenticator

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [dep for dep in project["project"]["dependencies"] if dep.lower().startswith("pyjwt")]
    assert pins == ["PyJWT[crypto]>=2.15"]
    nomad = NomadIdentityAuthenticator("http://127.0.0.1:9", audience="a", agent_jobs=["j"])
    client: jwt.PyJWKClient = nomad._jwks
    assert client.cooldown_duration == 30
