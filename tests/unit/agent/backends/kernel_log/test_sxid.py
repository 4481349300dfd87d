"""NVSwitch SXid lines (agent/backends/kernel_log/sxid.py) are read as their own type."""

from __future__ import annotations

from datetime import UTC, datetime

from repo_paths import FIXTURES

from agent.backends.kernel_log import (
    parse_sxid_line,
)

LOGS = FIXTURES / "kernel_logs"


def test_sxid_lines_are_read_as_their_own_type() -> None:
    """SXids are exposed as SxidEvent (switch number, switch PCI address), never as a GPU XidEvent."""
    line = "kern  :err   : 2025-01-25T10:34:54,859601+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Fatal, Link 34"
    sxid = parse_sxid_line(line)
    assert sxid is not None
    assert (sxid.sxid, sxid.switch, sxid.pci_bus_id, sxid.message) == (
        12028,
        1,
        "0000:84:00.0",
        "Fatal, Link 34",
    )
    assert sxid.at == datetime(2025, 1, 25, 10, 34, 54, 859601, tzinfo=UTC)
    assert parse_sxid_line("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.") is None
    sxids = [parse_sxid_line(line) for line in (LOGS / "dmesg-T-a100-node.txt").read_text().splitlines()]
    assert [event.sxid for event in sxids if event is not None] == [20009, 20009, 20009]
