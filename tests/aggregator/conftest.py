"""Fixtures for the aggregator tests: SQLite and a real PostgreSQL 15, in-process apps on a manual clock,
and live aggregator processes (``python -m aggregator``) for the restart, concurrency and CLI tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from waiting import SLOW_HANG_GUARD_S, wait_until

from aggregator.app import create_app
from aggregator.settings import AggregatorSettings, load_settings
from core.clock import ManualClock
from tests.aggregator.builders import TOKEN
from tests.aggregator.postgres import PostgresServer, PostgresUnavailable, free_port

with warnings.catch_warnings():
    # Starlette suggests a successor of httpx for its TestClient; the client itself works as documented.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server per test process; FAILS in CI (CI set) when the binaries are missing."""
    try:
        server = PostgresServer.start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(f"{exc} (outside CI the PostgreSQL tests are skipped)")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'aggregator.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.new_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC))


MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(database_url: str, clock: ManualClock) -> Iterator[MakeClient]:
    """``make_client(**settings)``: an in-process app on the manual clock, with the token set."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        values = {"database_url": database_url, "token": TOKEN, **overrides}
        settings = load_settings(environ={}, **values)
        client = TestClient(create_app(settings, now=clock.now))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    return make_client()


@dataclass
class LiveAggregator:
    """A ``python -m aggregator`` process on a free port."""

    url: str
    config: Path
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def restart(self) -> None:
        self.process = _spawn(self.config, self.log)
        _wait_ready(self.url, self.process, self.log)


def _spawn(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "aggregator", "--config", str(config)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"aggregator exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    if not wait_until(ready, timeout=SLOW_HANG_GUARD_S, interval=0.05):
        raise RuntimeError(f"aggregator did not become ready: {log.read_text()[-2000:]}")


StartAggregator = Callable[..., LiveAggregator]


@pytest.fixture
def start_aggregator(tmp_path: Path) -> Iterator[StartAggregator]:
    """``start_aggregator(database_url=..., **settings)`` -> a ready live aggregator, killed at teardown."""
    started: list[LiveAggregator] = []

    def start(**settings: Any) -> LiveAggregator:
        port = free_port()
        section = {"host": "127.0.0.1", "port": port, "token": TOKEN, **settings}
        AggregatorSettings.model_validate(section)  # fail here, not in the child, on a bad test setting
        config = tmp_path / f"aggregator-{port}.yaml"
        config.write_text(yaml.safe_dump({"aggregator": section}))
        log = tmp_path / f"aggregator-{port}.log"
        url = f"http://127.0.0.1:{port}"
        live = LiveAggregator(url=url, config=config, process=_spawn(config, log), log=log)
        started.append(live)
        _wait_ready(url, live.process, log)
        return live

    yield start
    for live in started:
        if live.process.poll() is None:
            live.process.terminate()
            try:
                live.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                live.kill()
