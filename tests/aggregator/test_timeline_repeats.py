"""Repeats and the order of cause, on SQLite and on PostgreSQL: a permit refused every pass while the
budget is spent is one row with a count and a time range; an incident's timeline and its node's keep the
first fault, the taint and the opening however many lines came after; the taint and the permit come after
the fault that caused them, the node writes of one transition in one row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from core.clock import ManualClock
from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import MakeClient

NODE = "node-0"
MARKS = ("condition", "label", "annotate", "event", "taint")


def _opened_with_marks(client: TestClient, clock: ManualClock) -> None:
    """The agent tainted before its report (its clock), and the report opens the incident a moment later."""
    marked_at = (clock.now() - timedelta(seconds=0.4)).isoformat()
    actions = [
        {"at": marked_at, "action": action, "result": "ok", "incident_id": "inc-1"} for action in MARKS
    ]
    body = report(NODE, 1, "unhealthy", incident="inc-1", actions=actions, sent_at=clock.now())
    assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 200


def _ask(client: TestClient) -> int:
    body = {"node": NODE, "action": "reboot", "incident_id": "inc-1"}
    status: int = client.post("/v1/permits", json=body, headers=AUTH).status_code
    return status


def _get(client: TestClient, path: str, **params: Any) -> Any:
    response = client.get(path, params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_refusal_repeated_every_pass_is_one_row_with_a_count_and_a_range(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client(budget_max_nodes=0, budget_min_nodes=0, permit_settle_s=0)
    _opened_with_marks(client, clock)
    first = clock.now()
    for _ in range(30):
        clock.advance(2)
        assert _ask(client) == 409
    refusals = [e for e in _get(client, "/v1/events", node=NODE) if e["kind"] == "permit_refused"]
    assert len(refusals) == 1
    [row] = refusals
    assert row["count"] == 30
    assert row["at"].startswith((first + timedelta(seconds=2)).isoformat()[:19])
    assert row["last_at"].startswith((first + timedelta(seconds=60)).isoformat()[:19])

    timeline = _get(client, "/v1/incidents/inc-1")["timeline"]
    assert [e["kind"] for e in timeline] == [
        "findings",
        "incident_opened",
        "state",
        "turned_unhealthy",
        *["action"] * len(MARKS),
        "permit_refused",
    ]


def test_the_timeline_is_in_cause_order(make_client: MakeClient, clock: ManualClock) -> None:
    """The taint (the agent's clock, before its report) comes after the fault and the opening it caused;
    the API keeps every line (the views group one transition's node writes)."""
    client = make_client()
    _opened_with_marks(client, clock)
    timeline = _get(client, f"/v1/nodes/{NODE}")["timeline"]
    kinds = [e["kind"] for e in timeline]
    assert kinds.index("findings") < kinds.index("incident_opened") < kinds.index("action")
    assert [e["details"]["action"] for e in timeline if e["kind"] == "action"] == list(MARKS)


def test_the_fault_the_opening_and_the_taint_stay_after_many_later_lines(
    make_client: MakeClient, clock: ManualClock
) -> None:
    """A day of refusals (a new row each quarter of an hour) pushes the opening out of the newest 50
    lines; the node's and the incident's timelines still show it."""
    client = make_client(budget_max_nodes=0, budget_min_nodes=0)
    _opened_with_marks(client, clock)
    for _ in range(80):
        clock.advance(16 * 60)
        assert _ask(client) == 409
    for path in (f"/v1/nodes/{NODE}", "/v1/incidents/inc-1"):
        kinds = [e["kind"] for e in _get(client, path)["timeline"]]
        assert kinds[:2] == ["findings", "incident_opened"], path
        assert "action" in kinds, path  # the taint and the other marks
    newest = _get(client, "/v1/events", node=NODE, limit=50)
    assert "incident_opened" not in [e["kind"] for e in newest]  # (what used to be all the node showed)


def test_the_first_page_of_events_says_how_many_match(make_client: MakeClient, clock: ManualClock) -> None:
    client = make_client()
    _opened_with_marks(client, clock)
    everything = client.get("/v1/events", params={"limit": 1000}, headers=AUTH)
    total = len(everything.json())
    assert everything.headers["X-Total-Count"] == str(total) and total > 3
    first = client.get("/v1/events", params={"limit": 2, "node": NODE}, headers=AUTH)
    assert len(first.json()) == 2 and first.headers["X-Total-Count"] == str(total)
    following = client.get(first.links["next"]["url"], headers=AUTH)
    assert following.status_code == 200 and "X-Total-Count" not in following.headers
