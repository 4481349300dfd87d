"""Report ingest: idempotency, validation, size limit, auth, incidents and their timeline, staleness,
manual requests and the repeat-offender hold — on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from core.clock import ManualClock
from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import MakeClient


def post(client: TestClient, body: dict[str, object]) -> dict[str, Any]:
    response = client.post("/v1/reports", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_a_retried_report_is_acknowledged_but_counted_once(client: TestClient) -> None:
    first = post(client, report("node-1", 5))
    retry = post(client, report("node-1", 5))
    older = post(client, report("node-1", 4))
    assert (first["accepted"], retry["accepted"], older["accepted"]) == (True, False, False)
    node = client.get("/v1/nodes/node-1", headers=AUTH).json()
    assert node["reports_accepted"] == 1
    assert node["last_seq"] == 5


def test_reports_without_or_with_a_wrong_token_get_401(client: TestClient) -> None:
    assert client.post("/v1/reports", json=report("node-1", 1)).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert client.post("/v1/reports", json=report("node-1", 1), headers=wrong).status_code == 401
    assert client.get("/v1/fleet", headers=wrong).status_code == 401


def test_an_invalid_report_is_rejected_with_422_and_stores_nothing(client: TestClient) -> None:
    bad_state = report("node-1", 1) | {"state": "on-fire"}
    wrong_node = report("node-1", 1) | {
        "verdict": {"node": "other", "status": "ok", "action": "none", "findings": []}
    }
    nul_label = report("node-1", 1) | {"labels": {"a": "b\x00c"}}
    for body in (bad_state, wrong_node, nul_label, {"node": "node-1"}):
        assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 422
    assert client.get("/v1/nodes", headers=AUTH).json() == []


def test_a_body_over_the_limit_gets_413_declared_or_streamed(make_client: MakeClient) -> None:
    client = make_client(max_report_bytes=4096)
    big = report("node-1", 1, gpus=64)
    assert client.post("/v1/reports", json=big, headers=AUTH).status_code == 413

    def chunks() -> object:
        yield b"{" + b" " * 5000
        yield b"}"

    streamed = client.post(
        "/v1/reports", content=chunks(), headers=AUTH | {"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert client.post("/v1/reports", json=report("node-1", 1, gpus=2), headers=AUTH).status_code == 200


def test_incident_opens_records_actions_and_closes_with_a_timeline(client: TestClient) -> None:
    post(client, report("node-1", 1))
    taint = {"at": "2026-01-01T00:00:05Z", "action": "taint", "result": "ok", "message": "NoSchedule"}
    post(client, report("node-1", 2, "unhealthy", incident="inc-1", actions=[taint]))
    post(client, report("node-1", 3, "healthy"))

    incident = client.get("/v1/incidents/inc-1", headers=AUTH).json()
    assert incident["open"] is False
    assert incident["reasons"] == ["XID_79"]
    kinds = [event["kind"] for event in incident["timeline"]]
    assert {"incident_opened", "findings", "action", "incident_closed"} <= set(kinds)
    history = [event["message"] for event in client.get("/v1/events", headers=AUTH).json()]
    assert "healthy -> unhealthy" in history
    assert "unhealthy -> healthy" in history


def test_a_node_silent_for_three_intervals_is_stale_everywhere(
    client: TestClient, clock: ManualClock
) -> None:
    post(client, report("node-1", 1, interval_s=30))
    post(client, report("node-2", 1, interval_s=30))
    clock.advance(60)
    post(client, report("node-2", 2, interval_s=30))
    clock.advance(31)  # node-1 silent 91 s > 3 x 30 s; node-2 silent 31 s

    assert client.get("/v1/nodes/node-1", headers=AUTH).json()["state"] == "stale"
    assert [n["name"] for n in client.get("/v1/nodes?state=stale", headers=AUTH).json()] == ["node-1"]
    summary = client.get("/v1/fleet", headers=AUTH).json()
    assert summary["stale"] == ["node-1"]
    assert summary["by_state"] == {"stale": 1, "healthy": 1}
    assert 'gpuhealth_aggregator_nodes{state="stale"} 1.0' in client.get("/metrics", headers=AUTH).text


def test_manual_quarantine_reaches_the_agent_until_it_acknowledges(client: TestClient) -> None:
    post(client, report("node-1", 1))
    created = client.post(
        "/v1/nodes/node-1/quarantine", json={"reason": "flaky NVLink", "requested_by": "ana"}, headers=AUTH
    )
    assert created.status_code == 201
    request_id = created.json()["id"]

    ack = post(client, report("node-1", 2))
    assert [(r["id"], r["kind"]) for r in ack["pending_requests"]] == [(request_id, "quarantine")]
    # Recorded as the authenticated caller, whatever the body claims.
    assert ack["hold"] == "quarantined by shared-token: flaky NVLink"
    assert client.get("/v1/nodes/node-1/requests", headers=AUTH).json()[0]["reason"] == "flaky NVLink"

    applied = post(client, report("node-1", 3, "quarantined", acknowledged=[request_id]))
    assert applied["pending_requests"] == []
    assert client.post("/v1/nodes/ghost/quarantine", json={"reason": "x"}, headers=AUTH).status_code == 404


def test_repeat_offender_is_held_for_replacement_until_a_human_releases_it(make_client: MakeClient) -> None:
    client = make_client(repeat_offender_incidents=3, repeat_offender_days=7, breaker_min_nodes=100)
    seq = 0
    for number in (1, 2, 3):
        seq += 1
        ack = post(client, report("node-1", seq, "unhealthy", incident=f"inc-{number}"))
        seq += 1
        post(client, report("node-1", seq, "healthy"))
    assert ack["hold"] is not None
    assert "repeat offender: 3 incidents in 7 days" in str(ack["hold"])
    assert [r["kind"] for r in ack["pending_requests"]] == ["quarantine"]
    assert "node-1" in client.get("/v1/fleet", headers=AUTH).json()["quarantined"]

    released = client.post(
        "/v1/nodes/node-1/release", json={"reason": "GPU replaced", "requested_by": "bo"}, headers=AUTH
    )
    assert released.status_code == 201
    after = post(client, report("node-1", seq + 1, "healthy"))
    assert after["hold"] is None
    assert [r["kind"] for r in after["pending_requests"]] == ["release"]
    again = post(client, report("node-1", seq + 2, "unhealthy", incident="inc-4"))
    assert again["hold"] is None  # incidents before the human's release no longer count


def test_an_incident_id_already_used_by_another_node_is_not_merged_into_it(client: TestClient) -> None:
    post(client, report("node-1", 1, "unhealthy", incident="inc-1"))
    post(client, report("node-2", 1, "unhealthy", incident="inc-1"))
    assert client.get("/v1/incidents/inc-1", headers=AUTH).json()["node"] == "node-1"
    # node-2's incident is recorded all the same, under a node-scoped id (issue 27: ids are per node)
    scoped = client.get("/v1/nodes/node-2", headers=AUTH).json()["incident_id"]
    assert scoped.startswith("inc-1~")
    assert client.get(f"/v1/incidents/{scoped}", headers=AUTH).json()["node"] == "node-2"


def test_incidents_older_than_the_repeat_offender_period_do_not_count(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(repeat_offender_incidents=3, repeat_offender_days=7, breaker_min_nodes=100)
    post(client, report("node-1", 1, "unhealthy", incident="inc-1"))
    post(client, report("node-1", 2, "unhealthy", incident="inc-2"))
    clock.advance(8 * 86_400)
    post(client, report("node-1", 3, "healthy", interval_s=None))
    ack = post(client, report("node-1", 4, "unhealthy", incident="inc-3"))
    assert ack["hold"] is None


def test_an_unknown_findings_age_reaches_on_call(client: TestClient) -> None:
    """The agent stamps an unknown finding with since when it has been unknown; the node's detail keeps it
    (the fleet page and `gpuhealth fleet node` show "unknown for 14 min: ...")."""
    body = report("node-1", 1, "unknown")
    since = "2025-12-31T23:46:00+00:00"
    body["verdict"]["findings"] = [
        {
            "check": "presence",
            "gpu": None,
            "status": "unknown",
            "code": "NVML_UNAVAILABLE",
            "message": "nvml call has not answered for 840 s (watchdog)",
            "action": "none",
            "since": since,
        }
    ]
    body["verdict"]["status"], body["verdict"]["action"] = "unknown", "none"
    post(client, body)
    [finding] = client.get("/v1/nodes/node-1", headers=AUTH).json()["findings"]
    assert finding["since"] == since.replace("+00:00", "Z") or finding["since"] == since
