"""What the on-call commands show against a live aggregator (in this process): the open incidents under
``gpuhealth status``, ``gpuhealth incidents`` with its filters and --json, and a list that says when it
shows fewer events than it found."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from core.clock import utc_now
from gpuhealth.cli.main import main
from sim.aggregator_process import AggregatorServer
from tests.aggregator.builders import AUTH, TOKEN, report

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AggregatorServer]:
    server = AggregatorServer(
        tmp_path_factory.mktemp("views") / "a.db", TOKEN, now=utc_now, budget_max_nodes=0, budget_min_nodes=0
    ).start()
    now = datetime.now(UTC)
    taint = {"at": now.isoformat(), "action": "taint", "result": "ok", "incident_id": "inc-a"}
    drain = {"at": now.isoformat(), "action": "drain", "result": "ok", "incident_id": "inc-a"}
    bodies = [
        report("node-a", 1, "unhealthy", incident="inc-a", sent_at=now, actions=[taint]),
        report("node-a", 2, "unhealthy", incident="inc-a", sent_at=now, actions=[drain, taint]),
        report("node-b", 1, "unhealthy", incident="inc-b", sent_at=now),
        report("node-c", 1, "unhealthy", incident="inc-c", sent_at=now),
        report("node-c", 2, "healthy", sent_at=now),  # inc-c closed
        report("node-d", 1, "healthy", sent_at=now),
        *_gpu_incident("node-e", now),
    ]
    for body in bodies:
        assert httpx.post(f"{server.url}/v1/reports", json=body, headers=AUTH).status_code == 200
    for _ in range(3):  # no budget: refused each pass, one row with a count
        ask = {"node": "node-b", "action": "reboot", "incident_id": "inc-b"}
        assert httpx.post(f"{server.url}/v1/permits", json=ask, headers=AUTH).status_code == 409
    yield server
    server.stop()


def _gpu_incident(node: str, now: datetime) -> list[dict[str, Any]]:
    """XID 79 on GPU 2 of ``node``; then its finding clears while the incident stays open."""
    bodies = []
    for seq in (1, 2):
        body = report(node, seq, "unhealthy", gpus=4, incident=f"inc-{node}", sent_at=now)
        for gpu in body["gpus"]:
            gpu["pci_bus_id"] = f"00000000:{0x18 + gpu['index']:02X}:00.0"
            gpu["serial"] = f"165012401424{gpu['index']}"
        if seq == 1:
            body["gpus"][2]["status"] = "fail"
            body["verdict"]["findings"][0]["gpu"] = body["gpus"][2]["uuid"]
            body["actions"] = [
                {"at": now.isoformat(), "action": action, "result": "ok", "incident_id": f"inc-{node}"}
                for action in ("taint", "condition", "label", "event")
            ]
        else:
            body["verdict"] |= {"findings": [], "status": "ok", "action": "none"}
        bodies.append(body)
    return bodies


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


def test_status_names_each_open_incident_with_what_was_done(run: Run) -> None:
    code, out, err = run("status")
    assert code == 0, err
    assert "3 open incidents" in out
    assert "open incidents (3):" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("node-")}
    assert "XID_79" in rows["node-a"] and "reboot" in rows["node-a"] and "taint, drain" in rows["node-a"]
    assert "nothing yet" in rows["node-b"]
    assert "node-c" not in rows  # closed
    as_json = json.loads(run("status", "--json")[1])
    assert [(i["node"], i["done"]) for i in as_json["incidents"]] == [
        ("node-a", "taint, drain"),
        ("node-b", "nothing yet"),
        ("node-e", "taint, condition, label, event"),
    ]
    assert "GPU 2 NVIDIA H200 SN 1650124014242" in rows["node-e"]


def test_incidents_lists_all_or_the_open_ones_as_a_table_or_json(run: Run) -> None:
    code, out, err = run("incidents")
    assert code == 0, err
    assert {"inc-a", "inc-b", "inc-c"} <= set(out.split())
    _code, out, _err = run("incidents", "--open", "--json")
    assert sorted(i["id"] for i in json.loads(out)) == ["inc-a", "inc-b", "inc-node-e"]
    _code, out, _err = run("incidents", "--node", "node-c", "--since", "1h")
    assert "inc-c" in out and "inc-a" not in out
    code, _out, err = run("incidents", "--since", "soon-ish")
    assert code == 2 and err.startswith("gpuhealth: error: --since:")


def test_events_says_when_it_shows_fewer_than_it_found(run: Run, live: AggregatorServer) -> None:
    code, out, err = run("events", "--limit", "3")
    assert code == 0
    assert len([line for line in out.splitlines() if "ago (" in line or "just now" in line]) == 3
    with httpx.Client(base_url=live.url, headers=AUTH) as client:
        total = len(client.get("/v1/events", params={"since": "1h", "limit": 1000}).json())
    assert err == f"3 of {total} events since 1h shown (the newest); --all for the rest\n"
    code, out, err = run("events", "--limit", "3", "--all", "--json")
    assert len(json.loads(out)) > 3 and err == ""
    code, out, err = run("events", "--limit", "1000")
    assert err == ""  # all there is: nothing to say


def test_times_are_utc_to_the_second_and_local_on_request(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    import time

    _code, out, _err = run("node", "node-a")
    assert re.search(r"just now \(\d\d-\d\d \d\d:\d\d:\d\dZ\)", out)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        _code, out, _err = run("node", "node-a", "--local-time")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert re.search(r"just now \(\d\d-\d\d \d\d:\d\d:\d\d JST\)", out)
    assert "Z)" not in out


def test_node_names_the_incidents_gpu_after_its_finding_cleared(run: Run) -> None:
    """The node view agrees with the incident: its action heads the node, its GPU is marked and named."""
    code, out, err = run("node", "node-e")
    assert code == 0, err
    head = out.splitlines()[0]
    assert "action reboot (its incident's)" in head
    gpu_row = next(line for line in out.splitlines() if line.startswith("2 "))
    assert "1650124014242" in gpu_row and "00000000:1A:00.0" in gpu_row and "in the open incident" in gpu_row
    assert "GPU 2 NVIDIA H200 SN 1650124014242 00000000:1A:00.0 GPU-node-e-2" in out
    assert "opened by XID_79 on GPU 2: XID_79 (reboot)" in out, out
    assert "no findings now" in out
    kinds = [line.split("│")[2].strip() for line in out.splitlines() if line.count("│") >= 3]
    assert kinds.index("findings") < kinds.index("incident_opened") < kinds.index("node_writes")
    assert "marked: taint, condition, label, event" in out  # one row for the transition's node writes
    detail = json.loads(run("node", "node-e", "--json")[1])
    assert detail["incident"]["gpus"][0]["serial"] == "1650124014242"


def test_a_repeated_line_is_one_row_with_its_count_and_range(run: Run) -> None:
    _code, out, _err = run("node", "node-b")
    [row] = [line for line in out.splitlines() if "permit_refused" in line]
    assert re.search(r"refused: .*\(x3, \d\d-\d\d \d\d:\d\d:\d\dZ to \d\d-\d\d \d\d:\d\d:\d\dZ\)", row), row
