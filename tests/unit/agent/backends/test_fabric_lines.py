"""mlx5 link lines and NVSwitch SXid severities from real-format kernel-log lines."""

from __future__ import annotations

from datetime import UTC, datetime

from repo_paths import FIXTURES

from agent.backends.kernel_log import parse_kernel_log, parse_link_line, parse_sxid_line

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
