"""``gpuhealth report`` and ``gpuhealth evidence`` as a user runs them against a live aggregator: the real
client, flags, output files, and one-line errors for bad input."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
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
    server = AggregatorServer(tmp_path_factory.mktemp("fleetview") / "a.db", TOKEN, now=utc_now).start()
    now = datetime.now(UTC)
    bodies = [
        report("node-a", 1, "unhealthy", incident="inc-a", sent_at=now),
        report("node-a", 2, "healthy", sent_at=now),
        report("node-b", 1, "healthy", sent_at=now),
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


def test_report_prints_the_table_and_the_same_figures_as_json(run: Run) -> None:
    code, out, err = run("report", "--since", "7d", "--by", "node")
    assert code == 0, err
    assert "1 incidents" in out and "fleet health" in out
    assert "node-a" in out and "node-b" in out
    code, out, err = run("report", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["incidents"] == 1 and answer["by"] == "model"
    assert [group["key"] for group in answer["groups"]] == ["NVIDIA H200"]


def test_report_refuses_a_bad_window_in_one_line(run: Run) -> None:
    code, out, err = run("report", "--since", "yesterday-ish")
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1, err


def test_evidence_writes_one_archive_with_the_summary_first_and_no_token(run: Run, tmp_path: Path) -> None:
    archive = tmp_path / "node-a.tar.gz"
    code, out, err = run("evidence", "node-a", "--gpu", "0", "-o", str(archive))
    assert code == 0, err
    assert f"wrote {archive}" in out
    with tarfile.open(archive) as opened:
        names = opened.getnames()
        assert names[0] == "node-a-gpu0-evidence/SUMMARY.txt"
        data = b"".join(opened.extractfile(m).read() for m in opened.getmembers())  # type: ignore[union-attr]
    assert "node-a-gpu0-evidence/incidents/inc-a.json" in names
    assert TOKEN.encode() not in data


def test_evidence_for_a_missing_gpu_or_an_unreadable_diag_file_is_one_line(run: Run, tmp_path: Path) -> None:
    code, _out, err = run("evidence", "node-a", "--gpu", "12", "-o", str(tmp_path / "x.tar.gz"))
    assert code == 2 and "node-a has no GPU 12" in err and len(err.strip().splitlines()) == 1
    code, _out, err = run("evidence", "node-a", "--dcgmi-diag", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json: cannot read the dcgmi diag output" in err
    assert not (tmp_path / "x.tar.gz").exists()
