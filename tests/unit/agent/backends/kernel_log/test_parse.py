"""The XID reader of agent/backends/kernel_log/parse.py: real log forms in, exact XidEvents out; files."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES

from agent.backends.kernel_log import (
    KernelLogError,
    parse_kernel_log,
    parse_sxid_line,
    parse_xid_line,
    read_kernel_log,
)
from core.snapshot import XidEvent

LOGS = FIXTURES / "kernel_logs"
# The yearless fixtures (classic syslog, journalctl short) are read as this year.
FIXTURE_YEAR = 2025


class Expected(NamedTuple):
    xid: int
    pci_bus_id: str | None
    pid: int | None
    process_name: str | None
    message: str | None
    at: str | None


def _as_expected(event: XidEvent) -> Expected:
    at = None if event.at is None else event.at.isoformat()
    return Expected(event.xid, event.pci_bus_id, event.pid, event.process_name, event.message, at)


EXPECTED: dict[str, list[Expected]] = {
    "dmesg-T-a100-node.txt": [
        Expected(43, "0000:00:05", 1045242, "pt_main_thread", "Ch 00000008", "2024-07-31T23:14:18+00:00"),
        Expected(43, "0000:00:05", 1084984, "pt_main_thread", "Ch 00000008", "2024-07-31T23:15:26+00:00"),
        Expected(
            31,
            "0000:00:07",
            2512125,
            "python3.10",
            (
                "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 "
                "faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE "
                "ACCESS_TYPE_VIRT_WRITE"
            ),
            "2024-08-05T03:54:13+00:00",
        ),
        Expected(
            94,
            "0000:00:08",
            None,
            None,
            "Contained: SM (0x1). RST: No, D-RST: No",
            "2024-08-09T13:32:56+00:00",
        ),
        Expected(
            48,
            "0000:00:07",
            None,
            None,
            (
                "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                "framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1"
            ),
            "2024-09-10T02:47:51+00:00",
        ),
        Expected(
            63,
            "0000:00:07",
            None,
            None,
            ("Row Remapper: New row (0x00000007fdf0de80) marked for remapping, reset gpu to activate."),
            "2024-09-10T02:47:51+00:00",
        ),
        Expected(
            95,
            "0000:00:07",
            5171,
            None,
            "Uncontained: FBHUB. RST: Yes, D-RST: No",
            "2024-09-10T02:47:52+00:00",
        ),
    ],
    "dmesg-fallen-off-bus.txt": [
        Expected(79, "0004:01:00", None, None, "GPU has fallen off the bus.", None),
        Expected(
            119,
            "0004:01:00",
            430,
            "nv_queue",
            ("Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."),
            None,
        ),
    ],
    "dmesg-gsp-timeout-xid119.txt": [
        Expected(
            119,
            "0000:9b:00",
            2024380,
            "nvidia-smi",
            (
                "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                "function 103 (GSP_RM_ALLOC) (0x2081 0x4)."
            ),
            None,
        ),
        Expected(
            119,
            "0000:9b:00",
            2024380,
            "nvidia-smi",
            (
                "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                "function 10 (FREE) (0xa55a0210 0x0)."
            ),
            None,
        ),
        Expected(
            119,
            "0000:9b:00",
            2024380,
            "nvidia-smi",
            (
                "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                "function 10 (FREE) (0xa55a0090 0x0)."
            ),
            None,
        ),
        Expected(
            119,
            "0000:9b:00",
            1263500,
            "cache_mgr_main",
            (
                "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                "function 76 (GSP_RM_CONTROL) (0x20801813 0x4c)."
            ),
            None,
        ),
        Expected(
            154,
            "0000:9b:00",
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            None,
        ),
    ],
    "dmesg-h100-app-faults.txt": [
        Expected(
            13,
            "0000:cb:00",
            None,
            None,
            ("Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"),
            None,
        ),
        Expected(
            13,
            "0000:cb:00",
            None,
            None,
            ("Graphics SM Global Exception on (GPC 7, TPC 7, SM 0): Multiple Warp Errors"),
            None,
        ),
        Expected(
            13,
            "0000:cb:00",
            None,
            None,
            ("Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174"),
            None,
        ),
        Expected(
            109,
            "0000:cb:00",
            1797828,
            "pt_main_thread",
            "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
            None,
        ),
        Expected(
            31,
            "0000:1b:00",
            2512125,
            "python3.10",
            (
                "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 "
                "faulted @ 0x73ac_1c000000. Fault is of type FAULT_PDE "
                "ACCESS_TYPE_VIRT_WRITE"
            ),
            None,
        ),
        Expected(43, "0000:1b:00", 2512125, "python3.10", "Ch 00000008", None),
        Expected(94, "0000:1b:00", None, None, "Contained: SM (0x1). RST: No, D-RST: No", None),
    ],
    "dmesg-iso-hgx-nvlink.txt": [
        Expected(
            74,
            "0000:b9:00",
            None,
            None,
            ("NVLink: fatal error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
            "2025-01-25T10:34:55.002117+00:00",
        ),
        Expected(45, "0000:b9:00", 91237, "python3", "Ch 00000010", "2025-01-25T10:34:55.004480+00:00"),
        Expected(45, "0000:c3:00", 91240, "python3", "Ch 00000011", "2025-01-25T10:34:56.120904+00:00"),
    ],
    "dmesg-legacy-pre-pci-prefix.txt": [
        Expected(16, "0000:01:00", None, None, "Head 00000000 Count 00000000", None),
        Expected(16, "0000:01:00", None, None, "Head 00000000 Count 00000001", None),
        Expected(8, "0000:01:00", None, None, "Channel 00000000", None),
        Expected(13, "0000:03:00", None, None, "0001 00000000 000090c0 00001b0c 00000000 00000080", None),
        Expected(32, "0000:01:00", None, None, "Channel ID 00000000 intr 00004000", None),
        Expected(31, "0000:01:00", None, None, "Ch 00000003, engmask 00000101, intr 10000000", None),
        Expected(
            31,
            "0000:01:00",
            None,
            None,
            (
                "Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 "
                "faulted @ 0x17_00592000. Fault is of type FAULT_PDE ACCESS_TYPE_READ"
            ),
            None,
        ),
        Expected(13, "0000:01:00", None, None, "Graphics Exception: ESR 0x4041b0=0x0", None),
        Expected(
            13,
            "0000:01:00",
            None,
            None,
            ("Graphics Exception: ChID 0052, Class 00000000, Offset 00001b0c, Data 1000f010"),
            None,
        ),
        Expected(43, "0000:01:00", None, None, "Ch 00000020, engmask 00000101", None),
        Expected(79, "0000:06:00", None, None, "GPU has fallen off the bus.", None),
    ],
    "journal-h100-xid.jsonl": [
        Expected(
            79, "0000:3b:00", None, None, "GPU has fallen off the bus.", "2024-08-09T14:21:55.230124+00:00"
        ),
        Expected(
            13,
            "0000:86:00",
            88231,
            "tr�iner",
            ("Graphics Exception: ESR 0x50d648=0x2000000 0x50d650=0x0 0x50d644=0xd3eff2 0x50d64c=0x7f"),
            "2024-08-09T14:22:01.231737+00:00",
        ),
        Expected(
            154,
            "0000:86:00",
            None,
            None,
            ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
            "2024-08-09T14:22:03.295312+00:00",
        ),
    ],
    "journalctl-gb200-nvlink.txt": [
        Expected(
            149,
            "0009:01:00",
            None,
            None,
            (
                "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 "
                "0x00000000 0x00000000 0x00000000 0x00000000)"
            ),
            "2025-07-09T10:42:47.620236+00:00",
        ),
        Expected(
            154,
            "0009:01:00",
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
            "2025-07-09T10:42:47.621162+00:00",
        ),
        Expected(
            149,
            "0008:01:00",
            None,
            None,
            (
                "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 "
                "0x00000000 0x00000000 0x00000000 0x00000000)"
            ),
            "2025-07-09T10:42:47.630899+00:00",
        ),
        Expected(
            154,
            "0019:01:00",
            None,
            None,
            ("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"),
            "2025-07-09T10:42:47.897562+00:00",
        ),
        Expected(
            145,
            "0018:01:00",
            None,
            None,
            (
                "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
                "0x00000000 0x00100000 0x00000004)"
            ),
            "2025-07-09T10:42:48.002114+00:00",
        ),
        Expected(
            45,
            "0009:01:00",
            1818990,
            "python3",
            "Ch 00000001 caused by previous Xid 149",
            "2025-07-09T10:42:48.310554+00:00",
        ),
        Expected(
            45,
            "0018:01:00",
            1818992,
            "python3",
            "Ch 0000000c caused by previous Xid 145",
            "2025-07-09T10:42:48.310560+00:00",
        ),
    ],
    "journalctl-h100-ecc-recovery.txt": [
        Expected(48, "0000:55:00", 2187734, "python", "channel 0x00000002", "2025-08-10T15:36:05+00:00"),
        Expected(
            63,
            "0000:55:00",
            2187734,
            "python",
            ("Row Remapper: New row (0x0000000e9b9107e0) marked for remapping, reset gpu to activate."),
            "2025-08-10T15:36:05+00:00",
        ),
        Expected(
            154,
            "0000:55:00",
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
            "2025-08-10T15:36:05+00:00",
        ),
    ],
    "journalctl-short-iso-blackwell-gsp.txt": [
        Expected(
            62,
            "0000:01:00",
            None,
            None,
            "223b6a66 00002100 00000000 20662342 20662ba6 20664272 2065f7ca 2063f48c",
            "2026-03-27T17:40:36+00:00",
        ),
        Expected(
            154,
            "0000:01:00",
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            "2026-03-27T17:40:36+00:00",
        ),
        Expected(45, "0000:01:00", 12542, "VLLM::Worker", "channel 0x00000002", "2026-03-27T17:40:36+00:00"),
        Expected(
            120,
            "0000:01:00",
            None,
            None,
            (
                "GSP kernel exception: store access page fault (cause:0xf) @ "
                "pc:0xffffffff93003d42, partition:4#0"
            ),
            "2026-03-29T15:38:59+00:00",
        ),
        Expected(
            154,
            "0000:01:00",
            None,
            None,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            "2026-03-29T15:38:59+00:00",
        ),
    ],
    "kmsg-h100-xid79.txt": [
        Expected(79, "0000:3b:00", None, None, "GPU has fallen off the bus.", None),
        Expected(
            13,
            "0000:86:00",
            88231,
            "träiner",
            ("Graphics Exception: ESR 0x50d648=0x2000000 0x50d650=0x0 0x50d644=0xd3eff2 0x50d64c=0x7f"),
            None,
        ),
        Expected(
            154,
            "0000:86:00",
            None,
            None,
            ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
            None,
        ),
    ],
    "syslog-p4d-rowremap.txt": [
        Expected(
            63,
            "0000:10:1c",
            1850,
            None,
            "Row Remapper: New row marked for remapping, reset gpu to activate",
            "2025-05-19T07:08:57+00:00",
        ),
        Expected(
            94,
            "0000:10:1d",
            7194,
            None,
            "Contained: CE User Channel (0x9). RST: No, D-RST: No",
            "2025-06-02T11:20:04+00:00",
        ),
        Expected(
            13,
            "0000:a0:1c",
            7201,
            "python",
            "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
            "2025-06-02T11:20:05+00:00",
        ),
        Expected(
            74,
            "0000:b9:00",
            None,
            None,
            ("NVLink: fatal error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
            "2025-06-02T11:31:40+00:00",
        ),
    ],
    "syslog-rfc5424-remote.txt": [
        Expected(
            79, "0000:3b:00", None, None, "GPU has fallen off the bus.", "2024-08-09T13:32:56.123000+00:00"
        ),
        Expected(
            119,
            "0000:3b:00",
            5012,
            "nvidia-smi",
            (
                "Timeout after 6s of waiting for RPC response from GPU2 GSP! Expected "
                "function 76 (GSP_RM_CONTROL) (0x2080014b 0x5)."
            ),
            "2024-08-09T13:33:01.004000+00:00",
        ),
    ],
    "syslog-rsyslog-iso.txt": [
        Expected(
            79, "0000:3b:00", None, None, "GPU has fallen off the bus.", "2024-08-09T13:32:56.123456+00:00"
        ),
        Expected(
            119,
            "0000:3b:00",
            5012,
            "nvidia-smi",
            (
                "Timeout after 6s of waiting for RPC response from GPU2 GSP! Expected "
                "function 76 (GSP_RM_CONTROL) (0x2080014b 0x5)."
            ),
            "2024-08-09T13:33:01.004318+00:00",
        ),
    ],
}


def test_every_fixture_file_is_pinned() -> None:
    """A new sample file cannot slip in without its exact expectations."""
    assert sorted(EXPECTED) == sorted(path.name for path in LOGS.iterdir() if path.name != "README.md")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_log_yields_exactly_its_xids(name: str) -> None:
    """Each real-world form: the XIDs, PCI ids, pids, names, messages and times, in log order, nothing else."""
    events = read_kernel_log(LOGS / name, year_hint=FIXTURE_YEAR)
    assert [_as_expected(event) for event in events] == EXPECTED[name]
    assert all(event.source == "kernel_log" and event.gpu_uuid is None for event in events)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parsing_line_by_line_gives_the_same_events_as_the_whole_log(name: str) -> None:
    """parse_kernel_log over an iterable of lines equals parse_xid_line applied to each line."""
    lines = (LOGS / name).read_text(encoding="utf-8").splitlines(keepends=True)
    one_by_one = [
        event for line in lines if (event := parse_xid_line(line, year_hint=FIXTURE_YEAR)) is not None
    ]
    assert parse_kernel_log(iter(lines), year_hint=FIXTURE_YEAR) == one_by_one
    assert [_as_expected(event) for event in one_by_one] == EXPECTED[name]


# --- single lines: forms, fields, what is not an XID -------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "pid", "name", "message"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
            None,
            None,
            "Graphics Exception",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 74, pid=<unknown>, name=<unknown>, NVLink: fatal error",
            None,
            None,
            "NVLink: fatal error",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 109, pid=1234, name=python3, Ch 00000008",
            1234,
            "python3",
            "Ch 00000008",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
            7062,
            None,
            "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 63, pid='N/A', Row Remapper: New row marked for remapping",
            None,
            None,
            "Row Remapper: New row marked for remapping",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 13, pid=9, name=ray::Worker 1, Graphics Exception",
            9,
            "ray::Worker 1",
            "Graphics Exception",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=9, name=python, ", 9, "python", None),
        ("Feb 01 14:25:31 archbox kernel: NVRM: Xid (PCI:0000:01:00): 38, pid=1659,", 1659, None, None),
        ("NVRM: Xid (PCI:0000:b3:00.0): 79", None, None, None),
    ],
)
def test_pid_and_process_name_are_extracted_exactly(
    line: str, pid: int | None, name: str | None, message: str | None
) -> None:
    """pid='<unknown>' / <unknown> / N/A -> None; a name with spaces or colons is kept; an empty message is None."""
    event = parse_xid_line(line)
    assert event is not None
    assert (event.pid, event.process_name, event.message) == (pid, name, message)


@pytest.mark.parametrize(
    ("device", "pci"),
    [
        ("PCI:0000:3b:00", "0000:3b:00"),
        ("0000:03:00", "0000:03:00"),
        ("PCI:0000:b3:00.0", "0000:b3:00.0"),
        ("PCI:0000:01:00 GPU-I:05", "0000:01:00"),
        ("PCI:0000:3b:00 GPU-I:01 GPU-CI:02", "0000:3b:00"),
        ("PCI:0019:01:00", "0019:01:00"),
        ("PCI:...", None),
    ],
)
def test_the_pci_address_is_kept_as_printed_without_the_label(device: str, pci: str | None) -> None:
    """MIG attribution and the PCI: label are not part of the address; a redacted address is None."""
    event = parse_xid_line(f"NVRM: Xid ({device}): 43, pid=1, name=a, Ch 00000008")
    assert event is not None and event.pci_bus_id == pci


@pytest.mark.parametrize(
    "line",
    [
        "[ 3021.118822] NVRM: GPU at PCI:0000:cb:00: GPU-5c1f8d6e-0f8a-4c1e-9a55-3b7f2c9d0a11",
        "[ 3021.118826] NVRM: GPU Board Serial Number: 1654123019871",
        "[  130.456301] NVRM: GPU 0004:01:00.0: GPU has fallen off the bus.",
        "[  130.456330] NVRM: A GPU crash dump has been created. If possible, please run",
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: fallen off the bus and is not responding to commands.",
        "[ 8830.006211] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).",
        "[ 8812.004533] NVRM: GPU4 RPC history (CPU -> GSP):",
        "[    5.402113] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024",
        "[73309.599396] nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate",
        "Aug 10 15:36:07 node gpud[1402]: NVRM: Xid (PCI:0000:55:00): 48, pid=2187734, name=python, channel 0x2",
        "<30>1 2024-08-09T13:32:56.123Z gpu-07 xid-watch 77 - - NVRM: Xid (PCI:0000:3b:00): 79, quoted",
        '{"MESSAGE": "NVRM: Xid (PCI:0000:86:00): 13, pid=1, name=a, b", "_TRANSPORT": "stdout"}',
        "NVRM: Xid error: xyz, invalid data",
        "",
    ],
)
def test_lines_that_are_not_a_gpu_xid_from_the_kernel_are_ignored(line: str) -> None:
    """Other NVRM lines, NVSwitch SXids, and programs quoting an NVRM line are not GPU XIDs."""
    assert parse_xid_line(line) is None


# --- files -----------------------------------------------------------------------------------------------


def test_an_unreadable_kernel_log_raises_one_line_naming_the_file(tmp_path: Path) -> None:
    """Missing file and directory: KernelLogError, one line, with the path."""
    for path in (tmp_path / "none.log", tmp_path):
        with pytest.raises(KernelLogError) as raised:
            read_kernel_log(path)
        assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_rotated_gzip_logs_are_read_and_corrupt_ones_rejected(tmp_path: Path) -> None:
    """kern.log.2.gz reads like kern.log; a truncated archive is a clear error, not a traceback."""
    packed = gzip.compress((LOGS / "syslog-p4d-rowremap.txt").read_bytes())
    good, bad = tmp_path / "syslog.2.gz", tmp_path / "syslog.3.gz"
    good.write_bytes(packed)
    bad.write_bytes(packed[: len(packed) // 2])
    assert [event.xid for event in read_kernel_log(good, year_hint=2025)] == [63, 94, 13, 74]
    with pytest.raises(KernelLogError, match=r"syslog\.3\.gz"):
        read_kernel_log(bad)


def test_a_saved_syslog_without_year_takes_the_year_of_its_last_write(tmp_path: Path) -> None:
    """Post-mortem on an old file: May dates in a file last written in Jan 2024 belong to 2023."""
    log = tmp_path / "syslog.1"
    log.write_bytes((LOGS / "syslog-p4d-rowremap.txt").read_bytes())
    last_write = datetime(2024, 1, 15, tzinfo=UTC).timestamp()
    os.utime(log, (last_write, last_write))
    assert {event.at.year for event in read_kernel_log(log) if event.at} == {2023}


def test_undecodable_bytes_do_not_stop_the_reader(tmp_path: Path) -> None:
    """A kernel log with invalid UTF-8 (binary junk, Latin-1 names) still yields its XIDs."""
    log = tmp_path / "dmesg.txt"
    log.write_bytes(
        b"\xff\xfe junk\n[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=tr\xe4iner, Graphics\n"
    )
    (event,) = read_kernel_log(log)
    assert (event.xid, event.process_name, event.message) == (13, "tr\ufffdiner", "Graphics")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(alphabet="0123456789abcdef:.,()' <>=NVRMXidPCIGU-\\x;{}[]\"", max_size=80))
def test_garbage_lines_never_raise(noise: str, structured_noise: str) -> None:
    """Random text, and random text around the Xid markers, is either an XidEvent or None: never an exception."""
    for line in (
        noise,
        structured_noise,
        f"NVRM: Xid ({structured_noise}",
        f"Xid (PCI:0000:3b:00): 1{structured_noise}",
    ):
        result = parse_xid_line(line)
        assert result is None or isinstance(result, XidEvent)
    assert isinstance(parse_kernel_log(noise + "\n" + structured_noise), list)
    sxid = parse_sxid_line(f"nvidia-nvswitch0: SXid ({structured_noise}")
    assert sxid is None or sxid.sxid >= 0
