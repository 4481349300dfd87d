"""Which fleet changes raise alerts, once each, in the transaction of the change; silences and routes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from waiting import wait_until

from aggregator.alerts.outbox import sinks_for
from aggregator.settings import load_settings
from core.alerts_api import Alert
from core.clock import ManualClock
from core.settings import SettingsError
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import MakeClient


def _alerts(client: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/alerts", headers=AUTH)
    assert response.status_code == 200, response.text
    return list(reversed(response.json()))  # oldest first


def _post(client: Any, body: dict[str, Any]) -> None:
    response = client.post("/v1/reports", json=body, headers=AUTH)
    assert response.status_code == 200, response.text


def test_incident_opened_escalated_resolved_raise_one_alert_each(make_client: MakeClient) -> None:
    """Open (restart_app: warning), escalate to reboot (critical), a retried report and an unchanged one
    raise nothing more, closing resolves with the incident's severity."""
    client = make_client()
    _post(client, report("node-1", 1, "degraded", incident="inc-1"))
    _post(client, report("node-1", 2, "unhealthy", incident="inc-1"))
    _post(client, report("node-1", 2, "unhealthy", incident="inc-1"))  # retry: not accepted
    _post(client, report("node-1", 3, "unhealthy", incident="inc-1"))
    _post(client, report("node-1", 4, "healthy"))

    alerts = _alerts(client)
    assert [(a["kind"], a["status"], a["severity"]) for a in alerts] == [
        ("incident_opened", "firing", "warning"),
        ("incident_escalated", "firing", "critical"),
        ("incident_resolved", "resolved", "critical"),
    ]
    assert {a["incident_id"] for a in alerts} == {"inc-1"}
    assert len({a["key"] for a in alerts}) == 3
    assert alerts[1]["details"]["gpus"] == ["GPU-node-1-0"]


def test_breaker_trip_and_reset_raise_one_alert_each(make_client: MakeClient) -> None:
    """Three of five nodes turn unhealthy: one tripped alert; a reset resolves it; a second reset is quiet."""
    client = make_client(breaker_min_nodes=3)
    for number in range(5):
        _post(client, report(f"node-{number}", 1))
    for number in range(3):
        _post(client, report(f"node-{number}", 2, "unhealthy", incident=f"inc-{number}"))
    for _ in range(2):
        response = client.post("/v1/breaker/reset", json={"requested_by": "alice"}, headers=AUTH)
        assert response.status_code == 200
    fleet = [a for a in _alerts(client) if a["node"] is None]
    assert [(a["kind"], a["status"], a["severity"]) for a in fleet] == [
        ("breaker_tripped", "firing", "critical"),
        ("breaker_reset", "resolved", "critical"),
    ]


def test_permits_refused_longer_than_threshold_alert_once_per_streak(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """Refusals for less than the threshold are quiet; past it, one alert; a grant ends the streak."""
    client = make_client(budget_max_nodes=0, budget_min_nodes=0, alert_permit_refused_after_s=600)
    ask = {"node": "node-1", "action": "reboot", "incident_id": "inc-1"}
    _post(client, report("node-1", 1, "unhealthy", incident="inc-1"))
    assert client.post("/v1/permits", json=ask, headers=AUTH).status_code == 409
    clock.advance(60)
    _post(client, report("node-1", 2, "unhealthy", incident="inc-1"))
    assert client.post("/v1/permits", json=ask, headers=AUTH).status_code == 409
    assert [a["kind"] for a in _alerts(client)] == ["incident_opened"]
    for seq in (3, 4):
        clock.advance(600)
        _post(client, report("node-1", seq, "unhealthy", incident="inc-1"))
        assert client.post("/v1/permits", json=ask, headers=AUTH).status_code == 409
    refused = [a for a in _alerts(client) if a["kind"] == "permit_refused"]
    assert len(refused) == 1
    assert refused[0]["details"]["code"] == "budget_exhausted"


def test_repeat_offender_held_raises_a_critical_alert(make_client: MakeClient) -> None:
    """The second incident within the period holds the node (action replace) and pages."""
    client = make_client(repeat_offender_incidents=2)
    _post(client, report("node-1", 1, "unhealthy", incident="inc-1"))
    _post(client, report("node-1", 2, "healthy"))
    _post(client, report("node-1", 3, "unhealthy", incident="inc-2"))
    offender = [a for a in _alerts(client) if a["kind"] == "repeat_offender"]
    assert len(offender) == 1
    assert offender[0]["severity"] == "critical"
    assert offender[0]["details"]["action"] == "replace"


def test_silences_by_node_and_by_selector_mute_until_they_end(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """A node silence mutes that node only; a label selector mutes every matching node; an ended or
    removed silence mutes nothing; muted alerts are kept (visible) but get no delivery."""
    client = make_client()
    _post(client, report("node-1", 1))
    _post(client, report("node-2", 1))
    by_node = {"node": "node-1", "duration_s": 3600, "reason": "maintenance", "created_by": "alice"}
    created = client.post("/v1/silences", json=by_node, headers=AUTH)
    assert created.status_code == 201, created.text
    _post(client, report("node-1", 2, "unhealthy", incident="inc-1"))
    _post(client, report("node-2", 2, "unhealthy", incident="inc-2"))
    muted = {a["incident_id"]: a["silence_id"] for a in _alerts(client)}
    assert muted == {"inc-1": created.json()["id"], "inc-2": None}

    zone = {
        "selector": {"topology.kubernetes.io/zone": "zone-a"},
        "duration_s": 600,
        "reason": "r",
        "created_by": "bob",
    }
    zone_silence = client.post("/v1/silences", json=zone, headers=AUTH).json()
    _post(client, report("node-2", 3, "healthy"))
    assert _alerts(client)[-1]["silence_id"] == zone_silence["id"]
    assert len(client.get("/v1/silences", headers=AUTH).json()) == 2

    assert client.delete(f"/v1/silences/{created.json()['id']}", headers=AUTH).json()["active"] is False
    clock.advance(601)
    _post(client, report("node-1", 3, "healthy"))
    assert _alerts(client)[-1]["silence_id"] is None
    assert client.get("/v1/silences", headers=AUTH).json() == []


@pytest.mark.parametrize(
    "body",
    [
        {"duration_s": 60, "reason": "r", "created_by": "a"},
        {"node": "n", "selector": {"a": "b"}, "duration_s": 60, "reason": "r", "created_by": "a"},
        {"node": "n", "duration_s": 0, "reason": "r", "created_by": "a"},
    ],
)
def test_a_silence_needs_one_target_and_a_positive_duration(
    make_client: MakeClient, body: dict[str, Any]
) -> None:
    """Neither or both of node and selector, or no duration: 422."""
    assert make_client().post("/v1/silences", json=body, headers=AUTH).status_code == 422


def test_a_node_that_stops_reporting_raises_one_stale_alert(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """The delivery worker notices the passed stale_at (nothing else runs in the background) once."""
    client = make_client(alert_poll_s=0.02)
    _post(client, report("node-1", 1, interval_s=10))
    clock.advance(31)
    wait_until(lambda: bool(_alerts(client)), interval=0.02)  # the worker polls every 20 ms
    time.sleep(0.1)  # more polls: still one alert
    assert [(a["kind"], a["node"]) for a in _alerts(client)] == [("node_stale", "node-1")]


def _alert(severity: str, labels: dict[str, str], kind: str = "incident_opened") -> Alert:
    fields = {"id": 1, "key": "k", "kind": kind, "status": "firing", "severity": severity, "group_key": "g"}
    fields |= {"node": "n", "incident_id": None, "summary": "s", "details": {}, "labels": labels}
    return Alert.model_validate(fields | {"created_at": "2026-01-01T00:00:00Z", "silence_id": None})


def test_routes_pick_sinks_by_severity_kind_and_node_labels() -> None:
    """Union of matching routes; no routes: every sink; a route naming an unknown sink is refused."""
    sinks = [{"name": name, "type": "webhook", "url": "http://x"} for name in ("pager", "chat", "zone-a")]
    routes = [
        {"sinks": ["pager"], "min_severity": "critical"},
        {"sinks": ["chat"]},
        {"sinks": ["zone-a"], "labels": {"zone": "a"}, "kinds": ["incident_opened"]},
    ]
    settings = load_settings(environ={}, token=TOKEN, alert_sinks=sinks, alert_routes=routes)
    assert sinks_for(_alert("critical", {"zone": "a"}), settings) == ["pager", "chat", "zone-a"]
    assert sinks_for(_alert("warning", {"zone": "b"}), settings) == ["chat"]
    assert sinks_for(_alert("warning", {"zone": "a"}, kind="node_stale"), settings) == ["chat"]
    everything = load_settings(environ={}, token=TOKEN, alert_sinks=sinks)
    assert sinks_for(_alert("info", {}), everything) == ["pager", "chat", "zone-a"]
    with pytest.raises(SettingsError, match="unknown sink"):
        load_settings(environ={}, token=TOKEN, alert_sinks=sinks, alert_routes=[{"sinks": ["nope"]}])
