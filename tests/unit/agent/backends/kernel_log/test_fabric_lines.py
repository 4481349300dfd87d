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


# --- quoted lines: another program's text is never the kernel's report --------------------------------------

FABRIC = FIXTURES / "fabric"


def test_sxid_and_link_lines_logged_by_another_program_are_quotes() -> None:
    """logger's default tag, a monitor, a health script, an RFC 5424 app: only the kernel's lines count."""
    lines = (FABRIC / "syslog-quoted-fabric-lines.txt").read_text().splitlines()
    sxids = [e for line in lines if (e := parse_sxid_line(line, year_hint=2025)) is not None]
    links = [k for line in lines if (k := parse_link_line(line, year_hint=2025)) is not None]
    assert [(e.sxid, e.severity) for e in sxids] == [(24007, "fatal"), (24007, None)]
    assert [(e.up, e.netdev) for e in links] == [(False, "enp1s0f0np0")]
    assert links[0].at == datetime(2025, 3, 4, 9, 33, tzinfo=UTC)


@pytest.mark.parametrize(
    "name",
    ["syslog-quoted-fabric-lines.txt", "journal-quoted-fabric-lines.jsonl", "kmsg-quoted-fabric-lines.txt"],
)
def test_a_saved_log_gives_only_the_kernels_own_fabric_lines(name: str) -> None:
    """syslog tags, journald's _TRANSPORT and /dev/kmsg's facility each tell the kernel from a program."""
    sxids, links = read_fabric_lines(FABRIC / name, year_hint=2025)
    assert [(e.sxid, e.severity) for e in sxids if e.severity is not None] == [(24007, "fatal")]
    assert [e.up for e in links] == [False]


# --- ib_core port-state lines ------------------------------------------------------------------------------


def test_ib_core_port_state_lines_are_link_events_of_a_device_and_port() -> None:
    """DOWN is a link down, ACTIVE a link up; INIT and ARMED are steps on the way up, not link changes."""
    lines = (FABRIC / "dmesg-ib-core-port-flap.txt").read_text().splitlines()
    events = [e for line in lines if (e := parse_link_line(line)) is not None]
    assert [(e.up, e.ib_device, e.port, e.netdev) for e in events] == [
        *[(up, "mlx5_0", 1, None) for _ in range(3) for up in (False, True)],
        (True, "rdmap9s0f0", 2, None),
    ]
    assert events[0].at == datetime(2025, 6, 11, 10, 14, 2, tzinfo=UTC)
    assert events[0].pci_bus_id == "0000:08:00.0"
    assert events[0].message == "mlx5_core 0000:08:00.0 mlx5_0: Port: 1 Link DOWN"
    quoted = "Jun 11 10:14:02 node6 nhc[2211]: mlx5_core 0000:08:00.0 mlx5_0: Port: 1 Link DOWN"
    assert parse_link_line(quoted) is None
