"""``gpuhealth export`` and ``gpuhealth replay`` as an operator runs them: the history of a live aggregator
written to one file, replayed on its own through a candidate policy, with a report the aggregator received
two hours late shown as stale and never acted on."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from core.clock import utc_now
from gpuhealth.cli.main import main
from sim.aggregator_process import AggregatorServer
from tests.aggregator.builders import AUTH, TOKEN, report

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AggregatorServer]:
    server = AggregatorServer(tmp_path_factory.mktemp("replay") / "a.db", TOKEN, now=utc_now).start()
    now = datetime.now(UTC)
    late = now - timedelta(hours=2)  # read two hours ago, delivered now (an outbox after an outage)
    bodies = [
        report("node-a", 1, "healthy", sent_at=now - timedelta(seconds=30)),
        report("node-a", 2, "unhealthy", incident="inc-a", sent_at=now - timedelta(seconds=20)),
        report("node-b", 1, "unhealthy", incident="inc-b", sent_at=late),
        report("node-c", 1, "healthy", sent_at=now),
    ]
    for body in bodies:
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


def test_export_then_replay_from_the_file_acts_on_fresh_history_only(run: Run, tmp_path: Path) -> None:
    exported = tmp_path / "history.json"
    code, _out, err = run("export", "--since", "1d", "-o", str(exported))
    assert code == 0, err
    history = json.loads(exported.read_text())
    assert history["schema"] == "gpuhealth.history/v1"
    assert {node["name"] for node in history["nodes"]} == {"node-a", "node-b", "node-c"}
    rows = [e for e in history["events"] if e["kind"] == "findings"]
    assert all("reported_at" in row["details"] for row in rows)

    policy = tmp_path / "drain.yaml"
    # The history ends seconds after node-a's fault: no settle wait, or its drain would fall after the end.
    policy.write_text(
        "policy: {cordon: true, drain: true}\nfleet: {budget_max_percent: 100, permit_settle_s: 0}\n"
    )
    code, out, err = run("replay", "--policy", str(policy), "--from", str(exported), "--json")
    assert code == 0, err
    result = json.loads(out)
    nodes = {node["node"]: node for node in result["nodes"]}
    assert nodes["node-a"]["would"]["taints"] == 1 and nodes["node-a"]["would"]["drains"] == 1
    # its only row arrived two hours late: shown, not acted on (the incident the live fleet opened is "did")
    assert nodes["node-b"]["would_incidents"] == [] and nodes["node-b"]["would"]["taints"] == 0
    assert len(nodes["node-b"]["did_incidents"]) == 1
    assert len(result["stale"]) == 1 and result["stale"][0].startswith("node-b: findings read at ")
    assert result["totals"]["did"]["taints"] == 0

    code, out, err = run("replay", "--policy", str(policy), "--from", str(exported))
    assert code == 0, err
    assert "WOULD HAVE" in out and "1 stale rows" in out
    assert "node-a" in out


def test_replay_refuses_a_bad_policy_or_history_file_in_one_line(run: Run, tmp_path: Path) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text("policy: {drian: true}\n")
    code, out, err = run("replay", "--policy", str(policy), "--from", str(tmp_path / "none.json"))
    assert (code, out) == (2, "")
    assert err.strip().count("\n") == 0 and "policy.drian: Extra inputs are not permitted" in err
    good = tmp_path / "good.yaml"
    good.write_text("policy: {taint: true}\n")
    code, out, err = run("replay", "--policy", str(good), "--from", str(tmp_path / "none.json"))
    assert (code, out) == (2, "")
    assert "none.json: cannot read" in err and err.strip().count("\n") == 0
