"""Secrets: the shared token, the metrics token and the database URL are SecretStr (never in a repr or a
dump), settable from files, and tokens have a minimum length. /metrics needs the metrics token or the viewer
role, and a scrape of a large fleet runs the same few aggregate queries as a scrape of a small one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from sqlalchemy import event, insert

from aggregator.app import create_app
from aggregator.auth.token_file import token_sha256
from aggregator.metrics import AggregatorMetrics
from aggregator.settings import MIN_TOKEN_LENGTH, load_settings
from aggregator.store.engine import Database, open_database
from aggregator.store.tables import nodes
from core.clock import ManualClock
from core.settings import SettingsError
from tests.aggregator.builders import TOKEN

METRICS_TOKEN = "metrics-token-0123456789abcdef0123456789"
VIEWER_TOKEN = "viewer-token-0123456789abcdef01234567890"
AGENT_TOKEN = "agent-token-0123456789abcdef012345678901"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_secrets_never_show_in_a_repr_or_a_dump(database_url: str) -> None:
    url = "postgresql+psycopg://gpuhealth:hunter2-hunter2@db:5432/gpuhealth"
    settings = load_settings(environ={}, token=TOKEN, database_url=url, metrics_token=METRICS_TOKEN)
    shown = repr(settings) + str(settings.model_dump()) + settings.model_dump_json()
    for secret in (TOKEN, "hunter2", METRICS_TOKEN):
        assert secret not in shown
    assert settings.database_url.get_secret_value() == url


def test_secrets_come_from_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "url").write_text(f"sqlite:///{tmp_path / 'a.db'}\n")
    (tmp_path / "metrics").write_text(METRICS_TOKEN)
    environ = {
        "GPUHEALTH_AGGREGATOR_SHARED_TOKEN_FILE": str(tmp_path / "token"),
        "GPUHEALTH_AGGREGATOR_DATABASE_URL_FILE": str(tmp_path / "url"),
        "GPUHEALTH_AGGREGATOR_METRICS_TOKEN_FILE": str(tmp_path / "metrics"),
    }
    settings = load_settings(environ=environ)
    assert settings.token is not None and settings.token.get_secret_value() == TOKEN
    assert settings.database_url.get_secret_value() == f"sqlite:///{tmp_path / 'a.db'}"
    assert settings.metrics_token is not None and settings.metrics_token.get_secret_value() == METRICS_TOKEN


def test_secret_files_errors_name_the_file_never_the_value(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"missing: cannot read shared_token_file") as missing:
        load_settings(environ={}, shared_token_file=tmp_path / "missing")
    assert "\n" not in str(missing.value)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SettingsError, match="database_url_file is empty"):
        load_settings(environ={}, token=TOKEN, database_url_file=tmp_path / "empty")
    (tmp_path / "token").write_text(TOKEN)
    with pytest.raises(SettingsError, match="set token or shared_token_file, not both"):
        load_settings(environ={}, token=TOKEN, shared_token_file=tmp_path / "token")
    (tmp_path / "short").write_text("short-secret")
    with pytest.raises(SettingsError) as short:
        load_settings(environ={}, shared_token_file=tmp_path / "short")
    assert f"a token needs at least {MIN_TOKEN_LENGTH} characters" in str(short.value)
    assert "short-secret" not in str(short.value)


def test_short_tokens_refuse_to_start_the_aggregator(tmp_path: Path) -> None:
    short = "s" * (MIN_TOKEN_LENGTH - 1)
    with pytest.raises(SettingsError, match=r"invalid aggregator setting token: a token needs at least 32"):
        load_settings(environ={"GPUHEALTH_AGGREGATOR_TOKEN": short})
    with pytest.raises(SettingsError, match=r"invalid aggregator setting metrics_token"):
        load_settings(environ={}, token=TOKEN, metrics_token=short)
    assert load_settings(environ={}, token="t" * MIN_TOKEN_LENGTH).token is not None


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "tokens:\n"
        f"  - {{name: grafana, role: viewer, sha256: {token_sha256(VIEWER_TOKEN)}}}\n"
        f"  - {{name: node-1, role: agent, node: node-1, sha256: {token_sha256(AGENT_TOKEN)}}}\n"
    )
    settings = load_settings(
        environ={}, database_url=database_url, token_file=tokens, metrics_token=METRICS_TOKEN
    )
    with TestClient(create_app(settings, now=ManualClock(start=NOW).now)) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_metrics_need_the_metrics_token_or_the_viewer_role(app: TestClient) -> None:
    assert app.get("/metrics").status_code == 401
    assert app.get("/metrics", headers=_bearer("w" * 40)).status_code == 401
    refused = app.get("/metrics", headers=_bearer(AGENT_TOKEN))
    assert refused.status_code == 403
    assert "may not read metrics" in refused.json()["detail"]
    for token in (METRICS_TOKEN, VIEWER_TOKEN):
        scraped = app.get("/metrics", headers=_bearer(token))
        assert scraped.status_code == 200
        assert "gpuhealth_aggregator_open_incidents" in scraped.text


def test_the_metrics_token_opens_nothing_else(app: TestClient) -> None:
    assert app.get("/v1/fleet", headers=_bearer(METRICS_TOKEN)).status_code == 401
    assert app.get("/v1/fleet", headers=_bearer(VIEWER_TOKEN)).status_code == 200


def _add_nodes(database: Database, count: int, start: int = 0) -> None:
    rows: list[dict[str, Any]] = [
        {
            "name": f"node-{index}",
            "state": "unhealthy" if index % 10 == 0 else "healthy",
            "status": "ok",
            "action": "none",
            "orchestrator": "kubernetes",
            "gpu_count": 8,
            "interval_s": 30.0,
            "first_seen_at": NOW,
            "last_report_at": NOW,
            "stale_at": NOW + timedelta(minutes=5) if index % 7 else NOW - timedelta(minutes=1),
            "last_seq": 1,
            "reports_accepted": 1,
            "labels": {},
            "gpus": [],
            "findings": [],
        }
        for index in range(start, start + count)
    ]
    with database.write() as conn:
        conn.execute(insert(nodes), rows)


def test_a_scrape_of_a_large_fleet_runs_the_same_few_aggregate_queries(database_url: str) -> None:
    """The fleet gauges are counted by the database (COUNT / GROUP BY), never read node by node: a scrape of
    5,000 nodes runs exactly the statements a scrape of 10 does, each an aggregate or a one-row read."""
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)  # no app: no background worker shares the engine's statements
    metrics = AggregatorMetrics(database, ManualClock(start=NOW).now)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(" ".join(statement.split()).lower())

    def scrape() -> tuple[str, list[str]]:
        statements.clear()
        event.listen(database.reader, "before_cursor_execute", record)
        try:
            return generate_latest(metrics.registry).decode(), list(statements)
        finally:
            event.remove(database.reader, "before_cursor_execute", record)

    try:
        _add_nodes(database, 10)
        _, small = scrape()
        _add_nodes(database, 4990, start=10)
        text, large = scrape()
    finally:
        database.dispose()
    assert 'gpuhealth_aggregator_nodes{state="healthy"} 3857.0' in text
    assert len(large) == len(small) <= 6, large
    for statement in large:
        if statement == "begin":  # SQLite's read transaction (immediate=False), not a query
            continue
        assert "count(" in statement or "where fleet_control.id" in statement, statement
