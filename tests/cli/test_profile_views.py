"""Behaviour profiles and shadow decisions as on-call sees them: ``gpuhealth status`` counts the nodes per
profile, ``gpuhealth node`` names the node's profile, ``gpuhealth events --shadow`` lists only what profiles in
shadow mode would have done, and why."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from core.clock import utc_now
from gpuhealth.cli.main import main
from sim.aggregator_process import AggregatorServer
from tests.aggregator.builders import AUTH, TOKEN, report

Run = Callable[..., tuple[int, str, str]]
WOULD = "would have drained node-a at 12:03:00: XID_79"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AggregatorServer]:
    server = AggregatorServer(tmp_path_factory.mktemp("profiles") / "a.db", TOKEN, now=utc_now).start()
    now = datetime.now(UTC)
    shadow = {"at": now.isoformat(), "action": "drain", "result": "shadow", "message": WOULD}
    marked = {"at": now.isoformat(), "action": "condition", "result": "ok"}
    node_a = report("node-a", 1, "unhealthy", incident="inc-a", sent_at=now, actions=[marked, shadow])
    node_a["labels"] = {"gpuhealth.io/profile": "canary"}
    node_b = report("node-b", 1, "healthy", sent_at=now)
    node_b["labels"] = {"gpuhealth.io/profile": "main"}
    node_c = report("node-c", 1, "healthy", sent_at=now)
    for body in (node_a, node_b, node_c):
        assert httpx.post(f"{server.url}/v1/reports", json=body, headers=AUTH).status_code == 200
    yield server
    server.stop()


@pytest.fixture
def run(live: AggregatorServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_URL", live.url)
    monkeypatch.setenv("GPUHEALTH_TOKEN", TOKEN)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


def test_status_counts_the_nodes_of_each_profile(run: Run) -> None:
    code, out, err = run("status")
    assert code == 0, err
    assert "profiles: canary 1, main 1" in out
    code, out, _ = run("status", "--json")
    assert json.loads(out)["profiles"] == {"canary": 1, "main": 1}


def test_node_names_its_profile(run: Run) -> None:
    code, out, err = run("node", "node-a")
    assert code == 0, err
    assert "node-a (kubernetes, profile canary)" in out
    _, out, _ = run("node", "node-c", "--json")
    assert json.loads(out)["profile"] is None


def test_events_shadow_lists_only_the_shadow_decisions_with_their_reason(run: Run) -> None:
    code, out, err = run("events", "--shadow", "--json")
    assert code == 0, err
    shadow = json.loads(out)
    assert [(e["kind"], e["node"], e["message"]) for e in shadow] == [("shadow", "node-a", WOULD)]
    _, out, _ = run("events", "--shadow")
    assert WOULD in out
    _, out, _ = run("events", "--json")
    assert {e["kind"] for e in json.loads(out)} >= {"action", "shadow", "state"}
