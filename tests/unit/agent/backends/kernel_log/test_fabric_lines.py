"""mlx5 link lines and NVSwitch SXid severities from real-format kernel-log lines."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from agent.backends.kernel_log import (
    KernelLogError,
    parse_kernel_log,
    parse_link_line,
    parse_sxid_line,
    read_fabric_lines,
)

LOG = FIXTURES / "fabric" / "dmesg-mlx5-flap-sxid.txt"


def test_mlx5_link_lines_are_link_events_with_interface_and_address() -> None:
    events = [e for line in LOG.read_text().splitlines() if (e := parse_link_line(line)) is not None]
    assert [(e.up, e.pci_bus_id, e.netdev) for e in events] == [
        (False, "0000:01:00.0", "enp1s0f0np0"),
        (True, "0000:01:00.0", "enp1s0f0np0"),
        (False, "0000:01:00.1", "enp1s0f1np1"),
        (True, "0000:01:00.1", "enp1s0f1np1"),
        (True, "cf63:00:02.0", "enP53091s1np0"),
    ]
    assert events[0].at == datetime(2025, 3, 4, 9, 24, 31, tzinfo=UTC)
    assert parse_link_line("mlx5_core 0000:01:00.0: Port module event: module 0, Cable plugged") is None


def test_sxid_lines_carry_the_drivers_severity_word() -> None:
    events = [e for line in LOG.read_text().splitlines() if (e := parse_sxid_line(line)) is not None]
    assert [(e.sxid, e.switch, e.severity) for e in events] == [
        (20009, 1, "non-fatal"),
        (24007, 0, "fatal"),
        (24007, 0, None),  # the "Severity 1 Engine instance" detail line names no severity
        (20034, 0, "fatal"),
    ]


def test_fabric_lines_never_become_gpu_xids() -> None:
    events = parse_kernel_log(LOG.read_text())
    assert [event.xid for event in events] == [79]


def test_a_saved_log_gives_its_fabric_lines_plain_gzip_or_journald_json(tmp_path: Path) -> None:
    """read_fabric_lines (gpuhealth check --kernel-log): the same SXids and link lines in every form."""
    text = LOG.read_text()
    packed = tmp_path / "dmesg.txt.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    journal = tmp_path / "journal.jsonl"
    journal.write_text(
        "".join(json.dumps({"MESSAGE": line, "_TRANSPORT": "kernel"}) + "\n" for line in text.splitlines())
    )
    for path in (LOG, packed, journal):
        sxids, links = read_fabric_lines(path)
        assert [event.sxid for event in sxids] == [20009, 24007, 24007, 20034], path
        assert [event.up for event in links] == [False, True, False, True, True], path
    with pytest.raises(KernelLogError):
        read_fabric_lines(tmp_path / "absent.txt")
