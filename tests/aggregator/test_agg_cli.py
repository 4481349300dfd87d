"""The on-call commands through the installed console script against a live aggregator: tables and --json,
quarantine / release, breaker status / reset, and one clear line for unreachable or unauthorised."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import LiveAggregator, _spawn, _wait_ready
from tests.aggregator.postgres import free_port

# GPUHEALTH_CLI lets the same tests drive another build of the command (e.g. inside the container image).
GPUHEALTH = os.environ.get("GPUHEALTH_CLI") or str(Path(sys.executable).parent / "gpuhealth")


@pytest.fixture(scope="module")
def aggregator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAggregator]:
    """A live aggregator with three nodes: two turned unhealthy (the breaker trips), one with an incident."""
    root = tmp_path_factory.mktemp("cli-aggregator")
    port = free_port()
    section = {
        "port": port,
        "token": TOKEN,
        "database_url": f"sqlite:///{root / 'a.db'}",
        "breaker_min_nodes": 2,
    }
    config = root / "aggregator.yaml"
    config.write_text(yaml.safe_dump({"aggregator": section}))
    live = LiveAggregator(
        url=f"http://127.0.0.1:{port}", config=config, process=_spawn(config, root / "log"), log=root / "log"
    )
    _wait_ready(live.url, live.process, live.log)
    drain = {"at": "2026-01-01T00:00:10Z", "action": "drain", "result": "ok", "message": "3 pods evicted"}
    for body in (
        report("node-1", 1, "unhealthy", incident="inc-1", actions=[drain]),
        report("node-2", 1, "healthy"),
        report("node-3", 1, "unhealthy"),
    ):
        assert httpx.post(f"{live.url}/v1/reports", json=body, headers=AUTH).status_code == 200
    yield live
    live.process.terminate()
    live.process.wait(timeout=10)


def gpuhealth(
    *args: str, url: str | None = None, token: str | None = TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUHEALTH_")}
    env |= {"NO_COLOR": "1", "COLUMNS": "200", "USER": "oncall"}
    if url:
        env["GPUHEALTH_AGGREGATOR_URL"] = url
    if token:
        env["GPUHEALTH_TOKEN"] = token
    return subprocess.run(
        [GPUHEALTH, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_status_shows_states_breaker_and_budget(aggregator: LiveAggregator) -> None:
    result = gpuhealth("status", url=aggregator.url)
    assert result.returncode == 0, result.stderr
    assert "3 nodes, 24 GPUs, 1 open incidents" in result.stdout
    assert "TRIPPED" in result.stdout
    assert "budget: 0 of 1 permits in use" in result.stdout

    as_json = json.loads(gpuhealth("status", "--json", url=aggregator.url).stdout)
    assert as_json["by_state"] == {"unhealthy": 2, "healthy": 1}
    assert as_json["breaker"]["state"] == "tripped"


def test_node_shows_gpus_incident_and_timeline_with_relative_times(aggregator: LiveAggregator) -> None:
    result = gpuhealth("node", "node-1", url=aggregator.url)
    assert result.returncode == 0, result.stderr
    assert "incident inc-1" in result.stdout
    assert "XID_79" in result.stdout
    assert "drain ok: 3 pods evicted" in result.stdout
    assert "d ago (01-01 00:00:10Z)" in result.stdout  # the drain, long ago, to the second in UTC
    # the reports of the fixture: seconds ago (more than ten when the tests before took that long)
    assert re.search(r"(just now|\d+ s ago) \(", result.stdout), result.stdout
    assert (
        json.loads(gpuhealth("node", "node-1", "--json", url=aggregator.url).stdout)["incident_id"] == "inc-1"
    )


def test_events_filter_by_node_and_time(aggregator: LiveAggregator) -> None:
    result = gpuhealth("events", "--since", "1h", "--node", "node-3", "--json", url=aggregator.url)
    assert result.returncode == 0, result.stderr
    events = json.loads(result.stdout)
    assert events
    assert {event["node"] for event in events} == {"node-3"}
    bad = gpuhealth("events", "--since", "yesterday-ish", url=aggregator.url)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1


def test_quarantine_then_release_reach_the_nodes_agent(aggregator: LiveAggregator) -> None:
    result = gpuhealth("quarantine", "node-2", "--reason", "flaky NVLink", url=aggregator.url)
    assert result.returncode == 0, result.stderr
    assert "quarantine of node-2 requested" in result.stdout
    pending = httpx.get(f"{aggregator.url}/v1/nodes/node-2/requests", headers=AUTH).json()
    assert [(p["kind"], p["requested_by"], p["reason"]) for p in pending] == [
        ("quarantine", "shared-token", "flaky NVLink")  # the authenticated caller, not $USER
    ]

    odd = gpuhealth("quarantine", "node-2", "--reason", "bad [/] link [red]", url=aggregator.url)
    assert odd.returncode == 0, odd.stderr
    shown = gpuhealth("node", "node-2", url=aggregator.url)
    assert "bad [/] link [red]" in shown.stdout  # shown as typed, never taken as colour markup

    assert gpuhealth("release", "node-2", url=aggregator.url).returncode == 0
    pending = httpx.get(f"{aggregator.url}/v1/nodes/node-2/requests", headers=AUTH).json()
    assert [p["kind"] for p in pending] == ["release"]

    missing = gpuhealth("quarantine", "ghost", "--reason", "x", url=aggregator.url)
    assert missing.returncode == 1
    assert "ghost has never reported" in missing.stderr


def test_breaker_reset_closes_it_and_is_recorded(aggregator: LiveAggregator) -> None:
    assert "TRIPPED" in gpuhealth("breaker", url=aggregator.url).stdout
    result = gpuhealth("breaker", "reset", "--reason", "driver rolled back", url=aggregator.url)
    assert result.returncode == 0, result.stderr
    assert "closed" in result.stdout
    assert (
        json.loads(gpuhealth("breaker", "status", "--json", url=aggregator.url).stdout)["state"] == "closed"
    )
    events = json.loads(gpuhealth("events", "--json", url=aggregator.url).stdout)
    assert any(e["kind"] == "breaker_reset" and "shared-token" in e["message"] for e in events)


def test_wrong_token_is_one_line_and_exit_1(aggregator: LiveAggregator) -> None:
    result = gpuhealth("status", url=aggregator.url, token="wrong")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "refused the token" in result.stderr


def test_unreachable_aggregator_is_one_line_and_exit_1() -> None:
    result = gpuhealth("status", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "2")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "cannot reach the aggregator" in result.stderr


def test_url_and_token_can_come_from_the_config_file(aggregator: LiveAggregator, tmp_path: Path) -> None:
    config = tmp_path / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"client": {"aggregator_url": aggregator.url, "token": TOKEN}}))
    result = gpuhealth("status", "--json", "--config", str(config), token=None)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nodes"] == 3
