"""The readings around an incident and a diagnostic's raw output (SQLite and PostgreSQL): the aggregator
keeps a bounded ring of each node's recent GPU readings, copies it into an incident's opening and closing,
and stores the raw ``dcgmi diag`` output an agent sends with its result, redacted."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text

from aggregator.app import create_app
from aggregator.readings_ring import RING_SIZE, SAMPLE_EVERY
from aggregator.settings import load_settings
from aggregator.store.engine import MIGRATIONS_DIR
from aggregator.store.tables import readings_ring
from core.aggregator_api import DIAG_OUTPUT_MAX_CHARS
from core.clock import ManualClock
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import MakeClient

NODE = "gpu-0007"


def _send(client: TestClient, clock: ManualClock, seq: int, state: str = "healthy", **extra: Any) -> None:
    """One report whose GPUs read ``temperature_c = seq`` (so each sample says which report it was)."""
    body = report(NODE, seq, state, sent_at=clock.now(), **extra)
    for gpu in body["gpus"]:
        gpu["readings"] = {"temperature_c": seq, "power_w": 500.0, "driver_version": "580.95.05"}
    answer = client.post("/v1/reports", json=body, headers=AUTH)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"]


def _temperatures(samples: list[dict[str, Any]]) -> list[int]:
    return [next(iter(sample["readings"].values()))["temperature_c"] for sample in samples]


def _ring_rows(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(readings_ring)).scalar_one())
    finally:
        engine.dispose()


def test_the_ring_keeps_the_last_samples_a_few_minutes_apart_and_no_more(
    make_client: MakeClient, clock: ManualClock, database_url: str
) -> None:
    client = make_client()
    every = int(SAMPLE_EVERY.total_seconds())
    for seq in range(1, 41):  # 40 reports 2.5 minutes apart: a sample every second report
        _send(client, clock, seq)
        clock.advance(every // 2)
    recent = client.get(f"/v1/nodes/{NODE}", headers=AUTH).json()["recent_readings"]
    assert _temperatures(recent) == list(range(40 - 2 * RING_SIZE + 1, 41, 2))  # the newest 8, oldest first
    assert len(recent[0]["readings"]) == 8  # every GPU of the node
    assert _ring_rows(database_url) == RING_SIZE  # bounded rows, whatever the node's age

    assert client.delete(f"/v1/nodes/{NODE}", headers=AUTH).status_code == 200
    assert _ring_rows(database_url) == 0  # a forgotten node's ring goes with it


def test_an_incident_carries_the_readings_before_during_and_at_its_ends(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client()
    every = SAMPLE_EVERY.total_seconds()
    for seq in (1, 2, 3):
        _send(client, clock, seq)
        clock.advance(every)
    _send(client, clock, 4, "unhealthy", incident="inc-ring")  # opens: always sampled
    clock.advance(30)
    _send(client, clock, 5, "unhealthy", incident="inc-ring")  # 30 s later: not sampled
    clock.advance(every)
    _send(client, clock, 6, "unhealthy", incident="inc-ring")
    clock.advance(30)
    _send(client, clock, 7)  # released: always sampled

    timeline = client.get("/v1/incidents/inc-ring", headers=AUTH).json()["timeline"]
    opened = next(e for e in timeline if e["kind"] == "incident_opened")["details"]
    closed = next(e for e in timeline if e["kind"] == "incident_closed")["details"]
    assert _temperatures(opened["readings_before"]) == [1, 2, 3]
    assert {sample["incident_id"] for sample in opened["readings_before"]} == {None}
    assert next(iter(opened["readings"].values()))["temperature_c"] == 4
    assert _temperatures(closed["readings_during"]) == [4, 6]
    assert next(iter(closed["readings"].values()))["temperature_c"] == 7
    recent = client.get(f"/v1/nodes/{NODE}", headers=AUTH).json()["recent_readings"]
    assert _temperatures(recent) == [1, 2, 3, 4, 6, 7]
    assert [sample["incident_id"] for sample in recent] == [None, None, None, "inc-ring", "inc-ring", None]

    # After the release: the next 3 samples also go into the incident's history, which outlives the ring.
    for seq in range(8, 8 + RING_SIZE + 2):
        clock.advance(every)
        _send(client, clock, seq)
    timeline = client.get("/v1/incidents/inc-ring", headers=AUTH).json()["timeline"]
    after = [e for e in timeline if e["kind"] == "incident_readings_after"]
    assert [next(iter(e["details"]["readings"].values()))["temperature_c"] for e in after] == [8, 9, 10]
    assert after[0]["message"] == "readings after incident inc-ring was released (1 of 3)"
    recent = client.get(f"/v1/nodes/{NODE}", headers=AUTH).json()["recent_readings"]
    assert 8 not in _temperatures(recent)  # the ring has moved on; the history kept them


def test_a_new_incident_ends_the_readings_after_the_last_one(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client()
    every = SAMPLE_EVERY.total_seconds()
    _send(client, clock, 1, "unhealthy", incident="inc-a")
    clock.advance(every)
    _send(client, clock, 2)  # released
    clock.advance(every)
    _send(client, clock, 3)  # after inc-a: 1 of 3
    clock.advance(every)
    _send(client, clock, 4, "unhealthy", incident="inc-b")  # a new incident: inc-a's "after" ends
    clock.advance(every)
    _send(client, clock, 5, "unhealthy", incident="inc-b")
    clock.advance(every)
    _send(client, clock, 6)
    timeline = client.get("/v1/incidents/inc-a", headers=AUTH).json()["timeline"]
    after = [e for e in timeline if e["kind"] == "incident_readings_after"]
    assert [next(iter(e["details"]["readings"].values()))["temperature_c"] for e in after] == [3]


def test_a_diagnostics_raw_output_is_stored_redacted_and_bounded(
    make_client: MakeClient, clock: ManualClock
) -> None:
    client = make_client()
    output = json.dumps(
        {"DCGM GPU Diagnostic": {"tests": [{"name": "Memory", "status": "Fail"}]}, "api_key": "k-123456789"}
    )
    action = {"at": clock.now().isoformat(), "action": "diag", "result": "failed", "message": "Memory fail"}
    _send(client, clock, 1, actions=[{**action, "output": output + " Bearer abcdefghij0123456789"}])
    [stored] = [
        e
        for e in client.get("/v1/events", params={"node": NODE}, headers=AUTH).json()
        if e["kind"] == "action"
    ]
    kept = stored["details"]["output"]
    assert '"Memory"' in kept and "Fail" in kept
    assert "k-123456789" not in kept and "abcdefghij0123456789" not in kept
    assert kept.count("[redacted]") == 2

    too_long = {**action, "output": "x" * (DIAG_OUTPUT_MAX_CHARS + 1)}
    body = report(NODE, 2, actions=[too_long])
    assert client.post("/v1/reports", json=body, headers=AUTH).status_code == 422


def test_a_fleet_from_before_the_ring_upgrades_and_starts_sampling(database_url: str) -> None:
    engine = create_engine(database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0005")
    now = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (name, state, status, action, orchestrator, gpu_count, interval_s, "
                "first_seen_at, last_report_at, stale_at, last_seq, reports_accepted, pending_requests, labels, "
                "gpus, findings) VALUES (:node, 'healthy', 'ok', 'none', 'kubernetes', 8, 30, :now, :now, "
                ":now, 10, 1, 0, '{}', '[]', '[]')"
            ),
            {"now": now, "node": NODE},
        )
    engine.dispose()

    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    with TestClient(create_app(settings)) as client:  # migrates to the newest revision
        _send(client, ManualClock(), 11)
        recent = client.get(f"/v1/nodes/{NODE}", headers=AUTH).json()["recent_readings"]
        assert _temperatures(recent) == [11]
