"""Settings precedence and errors; migrations create exactly the tables the code uses, idempotently;
probes and metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from repo_paths import DOCS

from aggregator.settings import AggregatorSettings, load_settings
from aggregator.store.engine import StoreError, open_database
from aggregator.store.tables import metadata
from aggregator.timespec import TimeSpecError, parse_since, relative
from core.settings import SettingsError
from tests.aggregator.builders import AUTH, TOKEN, report


def test_every_setting_has_a_default_and_a_description() -> None:
    for name, field in AggregatorSettings.model_fields.items():
        assert field.description, name
        assert not field.is_required(), name


def test_configuration_doc_lists_every_setting_with_its_variable() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert "## Aggregator" in text
    for name in AggregatorSettings.model_fields:
        assert f"| `{name}` |" in text, name
        assert f"GPUHEALTH_AGGREGATOR_{name.upper()}" in text, name


def test_environment_overrides_the_file_and_arguments_override_both(tmp_path: Path) -> None:
    config = tmp_path / "gpuhealth.yaml"
    config.write_text(f"aggregator:\n  token: {TOKEN}\n  port: 9000\n  budget_max_nodes: 3\n")
    env = {"GPUHEALTH_AGGREGATOR_PORT": "9100", "GPUHEALTH_AGGREGATOR_BREAKER_MIN_NODES": "4", "OTHER": "x"}
    settings = load_settings(config, environ=env, budget_max_nodes=9)
    assert settings.token is not None
    secret = settings.token.get_secret_value()
    assert (secret, settings.port, settings.breaker_min_nodes, settings.budget_max_nodes) == (
        TOKEN,
        9100,
        4,
        9,
    )


def test_bad_settings_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no identities"):
        load_settings(environ={})
    with pytest.raises(SettingsError, match="invalid aggregator setting port"):
        load_settings(environ={"GPUHEALTH_AGGREGATOR_PORT": "eighty"}, token=TOKEN)
    with pytest.raises(SettingsError, match="unknown_key"):
        load_settings(environ={}, token=TOKEN, unknown_key=1)
    bad = tmp_path / "bad.yaml"
    bad.write_text("aggregator: [1, 2]\n")
    with pytest.raises(SettingsError, match="must be a mapping"):
        load_settings(bad, environ={})


def test_migrations_match_the_tables_and_rerun_as_a_no_op(database_url: str) -> None:
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    first = open_database(settings)
    first.dispose()
    database = open_database(settings)  # second start: nothing to do, nothing breaks
    try:
        with database.writer.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), metadata)
        assert differences == []
    finally:
        database.dispose()


def test_a_database_that_cannot_keep_state_or_be_reached_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="in-memory"):
        open_database(load_settings(environ={}, database_url="sqlite://", token=TOKEN))
    with pytest.raises(StoreError, match="unsupported database"):
        open_database(load_settings(environ={}, database_url="mysql://x/y", token=TOKEN))
    with pytest.raises(StoreError, match="not a database URL"):
        open_database(load_settings(environ={}, database_url="::nonsense", token=TOKEN))


def test_since_accepts_durations_and_iso_times_and_relative_reads_naturally() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-12-01T00:00:00", now) == datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(TimeSpecError):
        parse_since("yesterday", now)
    assert relative(now - timedelta(minutes=3, seconds=5), now) == "3 min ago"
    assert relative(now + timedelta(hours=2), now) == "in 2 h"
    assert relative(now, now) == "just now"


def test_probes_need_no_token_and_metrics_count_ingest(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    assert client.get("/metrics").status_code == 401  # fleet counts are for a viewer or the metrics token
    client.post("/v1/reports", json=report("node-1", 1, "unhealthy", incident="inc-1"), headers=AUTH)
    client.post("/v1/reports", json=report("node-1", 1, "unhealthy", incident="inc-1"), headers=AUTH)
    text = client.get("/metrics", headers=AUTH).text
    assert 'gpuhealth_aggregator_reports_total{result="accepted"} 1.0' in text
    assert 'gpuhealth_aggregator_reports_total{result="duplicate"} 1.0' in text
    assert "gpuhealth_aggregator_report_duration_seconds_count 2.0" in text
    assert 'gpuhealth_aggregator_nodes{state="unhealthy"} 1.0' in text
    assert "gpuhealth_aggregator_open_incidents 1.0" in text
    assert "gpuhealth_aggregator_permits_in_use 0.0" in text
    assert "gpuhealth_aggregator_breaker_tripped 0.0" in text


def test_openapi_document_lists_the_api_with_bearer_auth(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert {"/v1/reports", "/v1/fleet", "/v1/nodes/{node}", "/v1/permits", "/v1/breaker/reset"} <= set(
        document["paths"]
    )
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
