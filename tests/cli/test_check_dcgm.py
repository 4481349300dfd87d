"""gpuhealth check --dcgm-metrics FILE|URL and --dcgmi-diag FILE, run as a user would."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from repo_paths import FIXTURES as TEST_FIXTURES

from agent.backends.dcgm.dcgmi_output import parse_health
from agent.backends.dcgm.exporter import parse_metrics
from core.dcgm import DcgmReadings
from core.snapshot import GpuSnapshot, NodeSnapshot

RunCli = Callable[..., subprocess.CompletedProcess[str]]

FIXTURES = TEST_FIXTURES / "dcgm"


def test_saved_page_alone_judges_the_gpus_it_names(run_cli: RunCli) -> None:
    result = run_cli(
        "check", "--dcgm-metrics", str(FIXTURES / "exporter-3.3.5-3.4.1-faults-pods.prom"), "--json"
    )
    assert result.returncode == 2, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["node"] == "gpu-node-03"
    assert (verdict["status"], verdict["action"]) == ("fail", "reboot")
    codes = [f["code"] for f in verdict["findings"]]
    assert sorted(codes) == sorted(set(codes)), "one finding per GPU and code"


def test_healthy_page_of_the_renamed_hostname_label_is_ok(run_cli: RunCli) -> None:
    result = run_cli(
        "check", "--dcgm-metrics", str(FIXTURES / "exporter-4.5-hostname-healthy.prom"), "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["node"] == "gpu-node-07"


def test_garbled_file_is_one_line_and_exit_3(run_cli: RunCli) -> None:
    result = run_cli("check", "--dcgm-metrics", str(FIXTURES / "garbled.prom"))
    assert result.returncode == 3
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "garbled.prom" in result.stderr


def test_unreachable_url_is_an_unknown_verdict(run_cli: RunCli) -> None:
    result = run_cli("check", "--dcgm-metrics", "http://127.0.0.1:9/metrics", "--node", "n1", "--json")
    assert result.returncode == 3
    verdict = json.loads(result.stdout)
    assert [(f["code"], f["status"]) for f in verdict["findings"]] == [
        ("DCGM_EXPORTER_UNAVAILABLE", "unknown")
    ]


def test_diag_file_with_page_maps_diag_gpus_to_page_uuids(run_cli: RunCli) -> None:
    result = run_cli(
        "check",
        "--dcgm-metrics",
        str(FIXTURES / "exporter-4.5-hostname-healthy.prom"),
        "--dcgmi-diag",
        str(FIXTURES / "diag-4.2.3-r2-memory-fail.json"),
        "--json",
    )
    assert result.returncode == 2, result.stderr
    memory = next(f for f in json.loads(result.stdout)["findings"] if f["code"] == "DCGM_DIAG_MEMORY")
    assert memory["gpu"] == "GPU-5c1f8d6e-0f8a-4c1e-9a55-3b7f2c9d0a11"


def test_bad_diag_file_is_one_line_and_exit_3(run_cli: RunCli, tmp_path: Path) -> None:
    bad = tmp_path / "diag.json"
    bad.write_text("Error: unable to connect to host engine\n")
    snapshot = TEST_FIXTURES / "snapshots"
    first = sorted(snapshot.glob("*.json"))[0]
    result = run_cli("check", "--snapshot", str(first), "--dcgmi-diag", str(bad))
    assert result.returncode == 3
    assert result.stdout == ""
    assert "diag.json" in result.stderr


def test_a_page_without_health_series_is_unknown_with_one_node_level_finding(run_cli: RunCli) -> None:
    """Only temperature, power and utilisation exported: unknown (exit 3), one node-level finding about the
    exporter's counters file, and no GPU called unreadable (they answered; the page left health out)."""
    result = run_cli(
        "check",
        "--dcgm-metrics",
        str(FIXTURES / "exporter-3.3.x-h100-eks-temp-power-util-only.prom"),
        "--json",
    )
    assert result.returncode == 3, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["node"] == "ip-10-0-142-87.us-west-2.compute.internal"
    assert verdict["status"] == "unknown"
    assert [(f["code"], f["gpu"], f["status"]) for f in verdict["findings"]] == [
        ("DCGM_EXPORTER_NO_HEALTH_SERIES", None, "unknown")
    ]


def test_a_saved_snapshot_replays_its_dcgm_readings(run_cli: RunCli, tmp_path: Path) -> None:
    """DCGM readings are part of the snapshot: ``check --snapshot`` judges them with no DCGM at hand."""
    page = (FIXTURES / "exporter-3.3.5-3.4.1-faults-pods.prom").read_text(encoding="utf-8")
    gpus = parse_metrics(page)
    report = parse_health((FIXTURES / "health-3.3-mem-fail-pcie-warn.json").read_text(encoding="utf-8"))
    snapshot = NodeSnapshot(
        node="gpu-node-03",
        gpus=[GpuSnapshot(index=gpu.index, uuid=gpu.uuid) for gpu in gpus],
        dcgm=DcgmReadings(exporter=gpus, health=report),
    )
    saved = tmp_path / "snapshot.json"
    saved.write_text(snapshot.to_json(), encoding="utf-8")
    result = run_cli("check", "--snapshot", str(saved), "--json")
    assert result.returncode == 2, result.stderr
    findings = json.loads(result.stdout)["findings"]
    checks = {f["check"] for f in findings}
    assert {"dcgm_exporter", "dcgm_health"} <= checks
    assert ("XID_79", "fail") in {(f["code"], f["status"]) for f in findings}
