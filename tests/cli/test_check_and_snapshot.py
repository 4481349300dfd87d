"""`gpuhealth check` and `gpuhealth snapshot` through the installed console script (docs/checks.md, docs/snapshot.md).

This machine has no NVIDIA driver, which is itself a case the contract covers: the live commands must say
so clearly, with exit 3 (unknown), never a traceback.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from core.snapshot import NodeSnapshot

RunCli = Callable[..., subprocess.CompletedProcess[str]]

SNAPSHOTS = FIXTURES / "snapshots"
KERNEL_LOGS = FIXTURES / "kernel_logs"


def test_check_json_prints_the_verdict_and_exits_with_the_nagios_code(run_cli: RunCli) -> None:
    result = run_cli("check", "--snapshot", str(SNAPSHOTS / "h100-sxm-xid79-lost.json"), "--json")
    verdict = json.loads(result.stdout)
    assert result.returncode == 2
    assert verdict["status"] == "fail" and verdict["action"] == "reboot"
    assert list(verdict) == ["node", "status", "action", "findings"]
    assert {"XID_79", "GPU_LOST"} <= {f["code"] for f in verdict["findings"]}
    assert all(
        list(f) == ["check", "gpu", "status", "code", "message", "action"] for f in verdict["findings"]
    )


def test_a_healthy_snapshot_exits_zero_with_no_failing_finding(run_cli: RunCli) -> None:
    result = run_cli("check", "--snapshot", str(SNAPSHOTS / "h100-sxm-healthy.json"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "ok"


def test_the_table_names_the_node_status_and_each_finding(run_cli: RunCli) -> None:
    result = run_cli("check", "--snapshot", str(SNAPSHOTS / "h100-sxm-row-remap-pending.json"))
    assert result.returncode == 2
    assert "FAIL" in result.stdout and "ROW_REMAP_PENDING" in result.stdout and "reset_gpu" in result.stdout
    assert "\x1b[" not in result.stdout, "no colour codes when NO_COLOR is set / not a terminal"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "gpuhealth.snapshot/v9", "node": "n", "gpus": []}', "unsupported schema"),
        ('{"schema": "gpuhealth.snapshot/v1", "node": "n", "gpus": [{"index": 0}]}', "gpus.0.uuid"),
        (
            '{"schema": "gpuhealth.snapshot/v1", "node": "n", "gpus": [{"index": 0, "uuid": "u", "lost": "no"}]}',
            "lost",
        ),
    ],
    ids=["garbled", "other-schema", "missing-uuid", "wrong-type"],
)
def test_an_invalid_snapshot_is_one_line_on_stderr_nothing_on_stdout_exit_3(
    run_cli: RunCli, tmp_path: Path, content: str, problem: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = run_cli("check", "--snapshot", str(bad), "--json")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert str(bad) in result.stderr and problem in result.stderr


def test_an_unreadable_snapshot_is_named_with_exit_3(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("check", "--snapshot", str(tmp_path / "missing.json"))
    assert (result.returncode, result.stdout) == (3, "")
    assert "missing.json" in result.stderr and result.stderr.count("\n") == 1


def test_check_on_a_machine_without_a_driver_says_so_with_exit_3(run_cli: RunCli) -> None:
    result = run_cli("check", "--json")
    assert result.returncode == 3, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "unknown"
    assert [f["code"] for f in verdict["findings"]] == ["NVML_UNAVAILABLE"]
    assert "nvidia driver" in verdict["findings"][0]["message"].lower()
    assert "Traceback" not in result.stderr


def test_snapshot_without_a_driver_writes_nvml_error_and_exits_3(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    result = run_cli("snapshot", "-o", str(out), "--node", "gpu-node-01")
    assert result.returncode == 3
    data = json.loads(out.read_text())
    assert data["schema"] == "gpuhealth.snapshot/v1" and data["node"] == "gpu-node-01"
    assert data["gpus"] == [] and data["nvml_error"]
    assert "Traceback" not in result.stderr


def test_kernel_log_xids_are_merged_into_the_verdict(run_cli: RunCli, tmp_path: Path) -> None:
    """Post-mortem: a healthy-looking snapshot plus the node's saved dmesg with an XID 79 on GPU 3."""
    snapshot = json.loads((SNAPSHOTS / "h100-sxm-healthy.json").read_text())
    bus = snapshot["gpus"][3]["pci_bus_id"]  # e.g. 00000000:5D:00.0 -> the kernel prints 0000:5d:00
    kernel_spelling = f"{bus[4:8]}:{bus[9:11].lower()}:{bus[12:14].lower()}"
    log = tmp_path / "dmesg.txt"
    log.write_text(
        "[ 1234.567890] nvidia-nvlink: Nvlink Core is being initialized\n"
        f"[ 5120.112233] NVRM: Xid (PCI:{kernel_spelling}): 79, pid=2931, name=python3, GPU has fallen off the bus.\n"
        f"[ 5120.112301] NVRM: GPU {kernel_spelling}.0: GPU has fallen off the bus.\n"
    )
    result = run_cli(
        "check", "--snapshot", str(SNAPSHOTS / "h100-sxm-healthy.json"), "--kernel-log", str(log), "--json"
    )
    verdict = json.loads(result.stdout)
    assert result.returncode == 2
    xid = [f for f in verdict["findings"] if f["code"] == "XID_79"]
    assert len(xid) == 1 and xid[0]["gpu"] == snapshot["gpus"][3]["uuid"] and xid[0]["action"] == "reboot"


def test_a_fatal_nvswitch_sxid_in_the_kernel_log_fails_the_node(run_cli: RunCli) -> None:
    """Post-mortem: the saved dmesg of an HGX node with a fatal SXid -> NVSWITCH_SXID_FATAL, exit 2; its
    XID 79 line names a PCI address the snapshot lacks and stays an XID (never an SXid)."""
    log = FIXTURES / "fabric" / "dmesg-mlx5-flap-sxid.txt"
    result = run_cli(
        "check", "--snapshot", str(SNAPSHOTS / "h100-sxm-healthy.json"), "--kernel-log", str(log), "--json"
    )
    verdict = json.loads(result.stdout)
    assert result.returncode == 2
    codes = {f["code"]: f for f in verdict["findings"]}
    assert codes["NVSWITCH_SXID_FATAL"]["action"] == "drain_and_reset"
    assert codes["NVSWITCH_SXID_FATAL"]["check"] == "nvswitch"
    assert "NVSWITCH_SXID_NONFATAL" in codes


def test_a_missing_kernel_log_is_one_line_exit_3(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli(
        "check",
        "--snapshot",
        str(SNAPSHOTS / "h100-sxm-healthy.json"),
        "--kernel-log",
        str(tmp_path / "none.log"),
    )
    assert (result.returncode, result.stdout) == (3, "")
    assert "none.log" in result.stderr and result.stderr.count("\n") == 1


def test_a_bad_config_file_is_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("checks:\n  xid:\n    no_such_setting: 3\n")
    result = run_cli("check", "--snapshot", str(SNAPSHOTS / "h100-sxm-healthy.json"), "--config", str(config))
    assert result.returncode == 3 and result.stdout == ""
    assert "no_such_setting" in result.stderr and result.stderr.count("\n") == 1


def test_a_config_override_changes_the_action_of_an_xid(run_cli: RunCli, tmp_path: Path) -> None:
    """Per-XID overrides: an operator decides XID 79 only needs a GPU reset on this fleet."""
    config = tmp_path / "config.yaml"
    config.write_text("checks:\n  xid:\n    overrides:\n      79: reset_gpu\n")
    result = run_cli(
        "check", "--snapshot", str(SNAPSHOTS / "h100-sxm-xid79-lost.json"), "--config", str(config), "--json"
    )
    xid = next(f for f in json.loads(result.stdout)["findings"] if f["code"] == "XID_79")
    assert xid["action"] == "reset_gpu"


def test_a_bad_flag_is_one_line_with_exit_2(run_cli: RunCli) -> None:
    result = run_cli("check", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--no-such-flag" in result.stderr


def test_version_and_help_work(run_cli: RunCli) -> None:
    assert run_cli("--version").stdout.startswith("gpuhealth ")
    help_text = run_cli("--help").stdout
    for command in ("check", "snapshot", "demo"):
        assert command in help_text


@pytest.mark.parametrize("content", [b"", b"# gpuhealth\n\nA GPU health agent.\n", bytes(range(256)) * 64])
def test_a_file_with_no_kernel_log_line_is_no_all_clear(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Post-mortem of the wrong file (empty, prose, random bytes): "0 lines recognised", exit 3, no verdict."""
    from gpuhealth.cli.main import main

    log = tmp_path / "kern.log"
    log.write_bytes(content)
    snapshot = str(SNAPSHOTS / "h100-sxm-healthy.json")
    code = main(["check", "--snapshot", snapshot, "--kernel-log", str(log), "--json"])
    out, err = capsys.readouterr()
    assert code == 3
    assert out == ""
    assert f"{log}: 0 lines recognised as a kernel log" in err and len(err.splitlines()) == 1


def test_a_saved_unknown_reading_shows_its_age(run_cli: RunCli, tmp_path: Path) -> None:
    """check --snapshot of a reading NVML never answered: "unknown for 3 h", never a fresh-looking verdict."""
    taken = datetime.now(UTC) - timedelta(hours=3)
    stale = NodeSnapshot(
        node="gpu-node-07",
        taken_at=taken,
        nvml_error="nvml call has not answered for 30 s (watchdog)",
        gpus=[],
    )
    saved = tmp_path / "stale.json"
    saved.write_text(stale.to_json(), encoding="utf-8")
    result = run_cli("check", "--snapshot", str(saved))
    assert result.returncode == 3
    assert "unknown for 3 h" in " ".join(result.stdout.split())
    as_json = json.loads(run_cli("check", "--snapshot", str(saved), "--json").stdout)
    assert datetime.fromisoformat(as_json["findings"][0]["since"]) == taken


def test_a_post_mortem_kernel_log_shows_the_flap_it_holds(run_cli: RunCli) -> None:
    """gpuhealth check --kernel-log on a log with three link downs in 16 s: the flap, not "all passed"."""
    result = run_cli(
        "check",
        "--snapshot",
        str(SNAPSHOTS / "h100-sxm-healthy.json"),
        "--kernel-log",
        str(FIXTURES / "fabric" / "dmesg-ib-core-port-flap.txt"),
        "--json",
    )
    verdict = json.loads(result.stdout)
    assert result.returncode == 2, result.stderr
    assert [f["code"] for f in verdict["findings"]] == ["IB_LINK_FLAP"]


def test_a_quoted_fatal_sxid_never_fails_the_node(run_cli: RunCli, tmp_path: Path) -> None:
    """check --kernel-log over a log whose only fatal SXids are quotes (logger, a monitor): the node stays ok."""
    lines = (FIXTURES / "fabric" / "syslog-quoted-fabric-lines.txt").read_text().splitlines()
    quoted = tmp_path / "syslog"
    quoted.write_text("\n".join(line for line in lines if " kernel: " not in line) + "\n")
    result = run_cli(
        "check", "--snapshot", str(SNAPSHOTS / "h100-sxm-healthy.json"), "--kernel-log", str(quoted), "--json"
    )
    verdict = json.loads(result.stdout)
    assert (result.returncode, verdict["status"], verdict["findings"]) == (0, "ok", [])
