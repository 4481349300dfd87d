"""Permits and the circuit breaker: budget, TTL, renew / release, cooldown, breaker trip and reset,
every decision in the history — on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.clock import ManualClock
from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import MakeClient


def seed(client: TestClient, count: int, state: str = "healthy", seq: int = 1) -> None:
    for number in range(count):
        response = client.post("/v1/reports", json=report(f"node-{number}", seq, state), headers=AUTH)
        assert response.status_code == 200, response.text


def ask(client: TestClient, node: str, incident: str | None = None, **extra: Any) -> Any:
    body = {"node": node, "action": "reboot", "incident_id": incident, **extra}
    return client.post("/v1/permits", json=body, headers=AUTH)


def test_budget_is_the_smaller_of_count_and_percent_and_refusals_say_why(make_client: MakeClient) -> None:
    client = make_client(budget_max_nodes=5, budget_max_percent=20)  # 10 nodes -> min(5, 2) = 2
    seed(client, 10)
    granted = [ask(client, f"node-{n}") for n in range(3)]
    assert [r.status_code for r in granted] == [201, 201, 409]
    assert granted[2].json() == {
        "code": "budget_exhausted",
        "reason": "budget exhausted: 2 of 2 permits in use",
    }
    assert client.get("/v1/fleet", headers=AUTH).json()["budget"] == {
        "limit": 2,
        "in_use": 2,
        "max_nodes": 5,
        "max_percent": 20.0,
    }
    kinds = [
        (e["kind"], e["node"]) for e in client.get("/v1/events", headers=AUTH).json() if "permit" in e["kind"]
    ]
    assert kinds == [("permit_granted", "node-0"), ("permit_granted", "node-1"), ("permit_refused", "node-2")]


def test_asking_again_while_holding_a_permit_returns_the_same_permit(client: TestClient) -> None:
    seed(client, 1)
    first, again = ask(client, "node-0"), ask(client, "node-0")
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]


def test_a_dead_agents_permit_expires_and_frees_the_budget(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(budget_max_nodes=1, budget_max_percent=100, permit_ttl_s=60, cooldown_s=0)
    seed(client, 2)
    assert ask(client, "node-0").status_code == 201
    assert ask(client, "node-1").status_code == 409
    clock.advance(61)
    seed(client, 2, seq=2)  # keep both nodes fresh; node-0's agent never renews
    assert ask(client, "node-1").status_code == 201


def test_renew_extends_an_active_permit_and_a_lapsed_one_cannot_be_revived(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(permit_ttl_s=60)
    seed(client, 1)
    permit = ask(client, "node-0").json()
    clock.advance(50)
    renewed = client.post(f"/v1/permits/{permit['id']}/renew", json={"ttl_s": 60}, headers=AUTH)
    assert renewed.status_code == 200
    clock.advance(50)  # 100 s after the grant, 50 s after the renewal: still active
    assert client.get("/v1/permits", headers=AUTH).json()[0]["id"] == permit["id"]
    clock.advance(11)
    assert client.post(f"/v1/permits/{permit['id']}/renew", json={}, headers=AUTH).status_code == 409
    assert client.post("/v1/permits/999/renew", json={}, headers=AUTH).status_code == 404


def test_release_is_idempotent_and_starts_the_cooldown_except_within_one_incident(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(cooldown_s=600, permit_settle_s=0)
    seed(client, 1)
    permit = ask(client, "node-0", incident="inc-1").json()
    for _ in range(2):
        released = client.post(f"/v1/permits/{permit['id']}/release", headers=AUTH)
        assert released.status_code == 200
        assert released.json()["active"] is False
    escalation = ask(client, "node-0", incident="inc-1")
    assert escalation.status_code == 201  # same incident: reset failed, now reboot
    client.post(f"/v1/permits/{escalation.json()['id']}/release", headers=AUTH)
    refused = ask(client, "node-0", incident="inc-2")
    assert refused.status_code == 409
    assert refused.json()["code"] == "cooldown"
    clock.advance(601)
    seed(client, 1, seq=2)
    assert ask(client, "node-0", incident="inc-2").status_code == 201


def test_unknown_and_stale_nodes_get_no_permit(client: TestClient, clock: ManualClock) -> None:
    assert ask(client, "ghost").json()["code"] == "unknown_node"
    seed(client, 1)
    clock.advance(91)
    assert ask(client, "node-0").json()["code"] == "stale_node"


def test_breaker_trips_when_too_many_nodes_turn_unhealthy_and_holds_until_reset(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(
        breaker_threshold_percent=20, breaker_window_s=600, breaker_min_nodes=3, permit_settle_s=0
    )
    seed(client, 10)
    for number in range(2):  # 20 %, but fewer nodes than breaker_min_nodes
        client.post("/v1/reports", json=report(f"node-{number}", 2, "unhealthy"), headers=AUTH)
    assert client.get("/v1/breaker", headers=AUTH).json()["state"] == "closed"
    assert ask(client, "node-0").status_code == 201

    client.post("/v1/reports", json=report("node-2", 2, "unhealthy"), headers=AUTH)  # 30 %
    breaker = client.get("/v1/breaker", headers=AUTH).json()
    assert breaker["state"] == "tripped"
    assert "3 of 10 GPU nodes" in breaker["reason"]
    assert ask(client, "node-1").json()["code"] == "breaker_tripped"
    clock.advance(3600)  # the window has passed, but only a human closes the breaker
    seed(client, 10, seq=3)
    assert ask(client, "node-1").json()["code"] == "breaker_tripped"

    reset = client.post(
        "/v1/breaker/reset", json={"requested_by": "ana", "reason": "driver rolled back"}, headers=AUTH
    )
    assert reset.json()["state"] == "closed"
    assert reset.json()["recent_unhealthy"] == 0  # transitions before the reset no longer count
    assert ask(client, "node-1").status_code == 201
    kinds = [e["kind"] for e in client.get("/v1/events?limit=1000", headers=AUTH).json()]
    assert kinds.count("breaker_tripped") == 1
    assert "breaker_reset" in kinds


def test_breaker_ignores_a_burst_smaller_than_its_minimum(make_client: MakeClient) -> None:
    client = make_client(breaker_threshold_percent=20, breaker_min_nodes=3)
    seed(client, 4)
    for number in range(2):  # 50 % of a tiny fleet, but only two nodes
        client.post("/v1/reports", json=report(f"node-{number}", 2, "unhealthy"), headers=AUTH)
    assert client.get("/v1/breaker", headers=AUTH).json()["state"] == "closed"


def fabric_down(node: str, seq: int) -> dict[str, Any]:
    """A report of the whole InfiniBand fabric down (every port stuck in INIT: the subnet manager gone)."""
    body = report(node, seq, "unhealthy")
    body["verdict"]["findings"] = [
        {
            "check": "infiniband",
            "gpu": None,
            "status": "fail",
            "code": "IB_FABRIC_DOWN",
            "message": f"{node}: every InfiniBand port stuck in INIT (no subnet manager?)",
            "action": "replace",
        }
    ]
    body["verdict"]["action"] = "replace"
    return body


def test_many_nodes_reporting_the_whole_fabric_down_are_one_shared_cause_not_drains(
    make_client: MakeClient,
) -> None:
    """Below the breaker's percentage, yet three nodes with the whole fabric down trip it: one cause (the
    subnet manager), not three nodes to drain one by one; the second is already refused as a shared cause."""
    client = make_client(
        breaker_threshold_percent=20, breaker_window_s=600, breaker_min_nodes=3, permit_settle_s=0
    )
    seed(client, 20)
    client.post("/v1/reports", json=fabric_down("node-0", 2), headers=AUTH)
    assert ask(client, "node-0").status_code == 201  # one node alone: perhaps its own cables
    client.post("/v1/reports", json=fabric_down("node-1", 2), headers=AUTH)
    refused = ask(client, "node-1")
    assert (refused.status_code, refused.json()["code"]) == (409, "shared_cause")
    client.post("/v1/reports", json=fabric_down("node-2", 2), headers=AUTH)  # 3 of 20: 15 %
    breaker = client.get("/v1/breaker", headers=AUTH).json()
    assert breaker["state"] == "tripped"
    assert "3 nodes report the whole InfiniBand fabric down (IB_FABRIC_DOWN)" in breaker["reason"]
    assert ask(client, "node-2").json()["code"] == "breaker_tripped"


def test_a_burst_trips_the_breaker_before_its_first_node_settles_so_no_permit_is_granted(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """The first node of a burst asks at once: it is told to wait the settle time; meanwhile the others report,
    the breaker trips, and when it asks again it is refused by the breaker: no capacity was taken."""
    client = make_client(breaker_threshold_percent=20, breaker_min_nodes=3, permit_settle_s=15)
    seed(client, 10)
    client.post("/v1/reports", json=report("node-0", 2, "unhealthy", incident="inc-0"), headers=AUTH)
    first = ask(client, "node-0", "inc-0")
    assert (first.status_code, first.json()["code"]) == (409, "settling")
    assert first.json()["retry_after_s"] == 15.0
    assert "waits 15 s after the node turned unhealthy" in first.json()["reason"]
    assert ask(client, "node-0", "inc-0").json()["retry_after_s"] == 15.0  # the manual clock has not moved
    clock.advance(4)
    assert ask(client, "node-0", "inc-0").json()["retry_after_s"] == 11.0
    for number in (1, 2):
        client.post("/v1/reports", json=report(f"node-{number}", 2, "unhealthy"), headers=AUTH)
    assert ask(client, "node-0", "inc-0").json()["code"] == "breaker_tripped"  # checked before the wait
    clock.advance(11)
    assert ask(client, "node-0", "inc-0").json()["code"] == "breaker_tripped"
    granted = [
        e for e in client.get("/v1/events?limit=1000", headers=AUTH).json() if e["kind"] == "permit_granted"
    ]
    assert granted == []


def test_a_lone_failure_is_granted_once_settled_and_its_escalation_does_not_wait_again(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(permit_settle_s=15, cooldown_s=3600)
    seed(client, 10)
    client.post("/v1/reports", json=report("node-0", 2, "unhealthy", incident="inc-0"), headers=AUTH)
    assert ask(client, "node-0", "inc-0").json()["code"] == "settling"
    clock.advance(15)
    permit = ask(client, "node-0", "inc-0")
    assert permit.status_code == 201, permit.text
    client.post(f"/v1/permits/{permit.json()['id']}/release", headers=AUTH)
    again = ask(client, "node-0", "inc-0")  # the same incident escalates (reset, then reboot): no new wait
    assert again.status_code == 201, again.text


def test_a_clock_stepped_back_past_the_turn_does_not_make_the_settle_last_the_step(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """The aggregator's clock steps back an hour after the node turned unhealthy (found by the fault
    suite): counted from the turn, the settle would refuse the permit for the hour; it ends instead."""
    client = make_client(permit_settle_s=15)
    seed(client, 10)
    client.post("/v1/reports", json=report("node-0", 2, "unhealthy", incident="inc-0"), headers=AUTH)
    assert ask(client, "node-0", "inc-0").json()["code"] == "settling"
    clock.advance(-3600)
    permit = ask(client, "node-0", "inc-0")
    assert permit.status_code == 201, permit.text


def test_a_healthy_node_and_a_zero_settle_time_never_wait(make_client: MakeClient) -> None:
    client = make_client(permit_settle_s=0, budget_max_nodes=2, budget_max_percent=100)
    seed(client, 2)
    client.post("/v1/reports", json=report("node-0", 2, "unhealthy"), headers=AUTH)
    assert ask(client, "node-0").status_code == 201
    settling = make_client(permit_settle_s=15, budget_max_nodes=2, budget_max_percent=100)
    assert ask(settling, "node-1").status_code == 201  # healthy (a planned reboot): nothing to settle


def test_a_profile_holds_at_most_its_share_of_the_budget_and_leaves_the_rest_to_the_fleet(
    make_client: MakeClient,
) -> None:
    """Budget 4 (of 10 nodes); profile canary has a 25 % share: its second node is refused, others are not."""
    profiles = {
        "definitions": {
            "canary": {"mode": "drain", "match": {"labels": {"pool": "canary"}}, "budget_share_percent": 25}
        }
    }
    client = make_client(budget_max_nodes=4, budget_max_percent=100, profiles=profiles)
    for number in range(10):
        body = report(f"node-{number}", 1)
        body["labels"] = {"gpuhealth.io/profile": "canary" if number < 3 else "default"}
        assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 200
    answers = [ask(client, f"node-{n}") for n in (0, 1, 3, 4)]
    assert [a.status_code for a in answers] == [201, 409, 201, 201]
    assert answers[1].json() == {
        "code": "budget_exhausted",
        "reason": "profile canary's share exhausted: 1 of 1 permits (25 % of 4)",
    }


def test_the_aggregator_refuses_a_profile_naming_an_unknown_key_in_one_line(tmp_path: Any) -> None:
    from aggregator.settings import load_settings
    from core.settings import SettingsError

    path = tmp_path / "aggregator.yaml"
    path.write_text(
        "aggregator:\n  allow_anonymous: true\n  profiles:\n    definitions:\n"
        "      canary: {mode: drain, match: {labels: {a: b}}, debounce: {polled_bad_reading: 2}}\n"
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(path, environ={})
    assert "profiles.definitions.canary.debounce.polled_bad_reading: Extra inputs are not permitted" in str(
        caught.value
    )
    assert "\n" not in str(caught.value)


def test_the_aggregators_profiles_may_come_from_the_environment_as_json() -> None:
    from aggregator.settings import load_settings

    profiles = '{"definitions": {"canary": {"mode": "drain", "match": {"labels": {"a": "b"}}, "budget_share_percent": 20}}}'
    environ = {"GPUHEALTH_AGGREGATOR_PROFILES": profiles, "GPUHEALTH_AGGREGATOR_ALLOW_ANONYMOUS": "true"}
    settings = load_settings(environ=environ)
    assert settings.profiles.definitions["canary"].budget_share_percent == 20


def test_the_breaker_trips_at_its_threshold_not_only_above_it(make_client: MakeClient) -> None:
    """3 of 15 GPU nodes (exactly 20 %) turned unhealthy: tripped, as 1,000 of 5,000 would be."""
    client = make_client(breaker_threshold_percent=20, breaker_min_nodes=3, permit_settle_s=0)
    seed(client, 15)
    for number in range(3):
        client.post("/v1/reports", json=report(f"node-{number}", 2, "unhealthy"), headers=AUTH)
    breaker = client.get("/v1/breaker", headers=AUTH).json()
    assert breaker["state"] == "tripped"
    assert "3 of 15 GPU nodes (20 %) turned unhealthy" in breaker["reason"]
