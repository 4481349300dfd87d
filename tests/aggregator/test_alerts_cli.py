"""``gpuhealth silence`` and ``gpuhealth status`` against a live aggregator: a silence is created, shown in
the fleet status, listed and removed; bad flags are one line on stderr."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import StartAggregator
from tests.aggregator.test_agg_cli import GPUHEALTH


def _cli(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [GPUHEALTH, *args, "--url", url, "--token", TOKEN]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=check)


@pytest.mark.slow
def test_silence_shows_in_status_lists_and_removes(tmp_path: Path, start_aggregator: StartAggregator) -> None:
    live = start_aggregator(database_url=f"sqlite:///{tmp_path / 'a.db'}")
    httpx.post(f"{live.url}/v1/reports", json=report("node-a", 1), headers=AUTH, timeout=10)

    made = _cli(live.url, "silence", "node-a", "--for", "2h", "--reason", "DIMM swap", "--by", "alice")
    assert made.stdout.startswith("silence 1 on node-a until ")
    zone = _cli(
        live.url,
        "silence",
        "--selector",
        "topology.kubernetes.io/zone=zone-a",
        "--for",
        "30m",
        "--reason",
        "rack power",
        "--json",
    )
    assert json.loads(zone.stdout)["selector"] == {"topology.kubernetes.io/zone": "zone-a"}

    status = _cli(live.url, "status").stdout
    assert "silenced (2)" in status and "DIMM swap" in status and "rack power" in status
    assert len(json.loads(_cli(live.url, "status", "--json").stdout)["silences"]) == 2

    assert _cli(live.url, "silence", "--remove", "1").stdout.strip() == "silence 1 ended"
    listed = json.loads(_cli(live.url, "silence", "--list", "--json").stdout)
    assert [s["id"] for s in listed] == [2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["silence", "node-a", "--reason", "x"], "--for: give a duration"),
        (["silence", "node-a", "--for", "soon", "--reason", "x"], "--for: give a duration"),
        (["silence", "--for", "1h", "--reason", "x"], "either NODE or --selector"),
        (["silence", "n", "--selector", "novalue", "--for", "1h", "--reason", "x"], "either NODE"),
        (["silence", "--selector", "novalue", "--for", "1h", "--reason", "x"], "expected KEY=VALUE"),
        (["silence", "node-a", "--for", "1h"], "--reason is required"),
    ],
)
def test_bad_silence_flags_are_one_line_errors_before_any_request(args: list[str], message: str) -> None:
    done = _cli("http://127.0.0.1:9", *args, check=False)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
