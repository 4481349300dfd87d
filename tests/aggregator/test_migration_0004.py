"""Migration 0004 on a database that already holds a fleet (SQLite and PostgreSQL): nodes keep their
sequence (no epoch yet), the audit table starts empty, and an agent that sends no epoch carries on."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from aggregator.app import create_app
from aggregator.settings import load_settings
from aggregator.store.engine import MIGRATIONS_DIR
from tests.aggregator.builders import AUTH, TOKEN, report


def test_an_existing_fleet_upgrades_and_keeps_its_sequences(database_url: str) -> None:
    engine = create_engine(database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0003")
    now = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (name, state, status, action, orchestrator, gpu_count, interval_s, "
                "first_seen_at, last_report_at, stale_at, last_seq, reports_accepted, pending_requests, labels, "
                "gpus, findings) VALUES ('node-1', 'healthy', 'ok', 'none', 'kubernetes', 8, 30, :now, :now, "
                ":now, 500, 1, 0, '{}', '[]', '[]')"
            ),
            {"now": now},
        )
    engine.dispose()

    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    with TestClient(create_app(settings)) as client:  # migrates to the newest revision
        retry = client.post("/v1/reports", json=report("node-1", 500), headers=AUTH).json()
        assert (retry["accepted"], retry["last_seq"]) == (False, 500)
        assert client.post("/v1/reports", json=report("node-1", 501), headers=AUTH).json()["accepted"]
        assert client.get("/v1/audit", headers=AUTH).json() == []
