"""Kernel-log XID reader: real log forms in, exact XidEvents out; attach to snapshots; live followers."""

from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES
from waiting import HANG_GUARD_S, wait_until

from agent.backends.kernel_log import (
    JournalFollower,
    KernelLogError,
    KmsgFollower,
    attach_kernel_xids,
    parse_kernel_log,
    parse_kmsg_record,
    parse_sxid_line,
    parse_xid_line,
    read_kernel_log,
)
from core.clock import ManualClock
from core.snapshot import GpuSnapshot, NodeSnapshot, XidEvent

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
    ("line", "at"),
    [
        (
            "1759600000.500000 gpu-3 kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
            "2025-10-04T17:46:40.500000+00:00",
        ),
        (
            "Sat 2025-10-04 17:46:40 UTC gpu-3 kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
            "2025-10-04T17:46:40+00:00",
        ),
        (
            "192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: NVRM: Xid (PCI:0000:01:00): 79, x",
            "2026-04-22T21:27:51.291660+00:00",
        ),
        (
            "<4>Oct  4 17:46:40 gpu-3 kernel: [ 88.123456] NVRM: Xid (PCI:0000:01:00): 79, x",
            "2025-10-04T17:46:40+00:00",
        ),
        ("Oct 04 17:46:40 kernel: NVRM: Xid (PCI:0000:01:00): 79, x", "2025-10-04T17:46:40+00:00"),
        (
            "2024-08-09T13:32:56.123456789Z stderr F NVRM: Xid (PCI:0000:01:00): 79, x",
            "2024-08-09T13:32:56.123456+00:00",
        ),
        ("[  88.123456] NVRM: Xid (PCI:0000:01:00): 79, x", None),
        ("6,1234,88123456,-;NVRM: Xid (PCI:0000:01:00): 79, x", None),
        ("NVRM: Xid (PCI:0000:01:00): 79, x", None),
    ],
)
def test_absolute_times_are_read_from_every_prefix_and_monotonic_ones_are_not(
    line: str, at: str | None
) -> None:
    """short-unix, short-full, Talos ISO in brackets, syslog with <pri> or --no-hostname, a container log (CRI)
    tailing dmesg: UTC; raw dmesg and kmsg carry only time since boot: None."""
    event = parse_xid_line(line, year_hint=2025)
    assert event is not None and event.xid == 79
    assert (event.at.isoformat() if event.at else None) == at


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


def test_a_yearless_date_without_hint_is_never_in_the_future() -> None:
    """Without year_hint, classic syslog dates take the current year, or the previous one if that is ahead."""
    past = datetime.now(UTC) - timedelta(days=30)
    ahead = datetime.now(UTC) + timedelta(days=30)
    for moment, year in ((past, past.year), (ahead, ahead.year - 1)):
        line = f"{moment:%b} {moment.day:2d} {moment:%H:%M:%S} n kernel: NVRM: Xid (PCI:0000:01:00): 79, x"
        event = parse_xid_line(line)
        assert event is not None and event.at is not None and event.at.year == year


def test_impossible_dates_leave_the_time_unknown() -> None:
    """A malformed stamp does not drop the XID; it only loses its time."""
    for prefix in (
        "Feb 30 10:00:00 n kernel:",
        "2025-13-01T00:00:00Z n kernel:",
        "2025-01-01T00:00:00+99:00",
    ):
        event = parse_xid_line(f"{prefix} NVRM: Xid (PCI:0000:01:00): 79, x", year_hint=2025)
        assert event is not None and event.xid == 79 and event.at is None


def test_kmsg_records_are_split_and_unescaped() -> None:
    """/dev/kmsg: sequence, microseconds since boot, message with \\xNN escapes decoded (UTF-8)."""
    record = parse_kmsg_record("4,2039,3027120442,-,caller=T12;NVRM: name=tr\\xc3\\xa4iner\\x0anext \\x5c")
    assert record == (2039, 3027120442, "NVRM: name=träiner\nnext \\")
    assert parse_kmsg_record(" SUBSYSTEM=pci") is None


def test_a_log_that_is_all_json_documents_is_read_as_journal_entries() -> None:
    """journalctl -o json-pretty (multi-line objects) and a JSON array of entries are both accepted."""
    entries = [json.loads(line) for line in (LOGS / "journal-h100-xid.jsonl").read_text().splitlines()]
    pretty = "\n".join(json.dumps(entry, indent=4) for entry in entries)
    expected = [
        _as_expected(event) for event in parse_kernel_log((LOGS / "journal-h100-xid.jsonl").read_text())
    ]
    assert [_as_expected(event) for event in parse_kernel_log(pretty)] == expected
    assert [_as_expected(event) for event in parse_kernel_log(json.dumps(entries))] == expected
    assert [event.xid for event in expected] == [79, 13, 154]


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


# --- attaching to a snapshot -------------------------------------------------------------------------------

T0 = datetime(2025, 8, 10, 15, 36, 5, tzinfo=UTC)


def _snapshot(*gpus: tuple[str, str], unattributed: list[XidEvent] | None = None) -> NodeSnapshot:
    return NodeSnapshot(
        node="gpu-node-a",
        gpus=[GpuSnapshot(index=index, uuid=uuid, pci_bus_id=bus) for index, (uuid, bus) in enumerate(gpus)],
        unattributed_xid_events=unattributed or [],
    )


def _kernel(xid: int, pci: str | None, at: datetime | None = None, **fields: object) -> XidEvent:
    return XidEvent.model_validate(
        {"source": "kernel_log", "xid": xid, "pci_bus_id": pci, "at": at, **fields}
    )


def _nvml(xid: int, uuid: str, at: datetime) -> XidEvent:
    return XidEvent(source="nvml", xid=xid, gpu_uuid=uuid, at=at)


@pytest.mark.parametrize("spelling", ["0000:3b:00", "00000000:3B:00.0", "3b:00.0", "0000:3B:00.1"])
def test_every_pci_spelling_maps_to_the_same_gpu(spelling: str) -> None:
    """The kernel's 0000:3b:00, NVML's 00000000:3B:00.0 and a bare 3b:00.0 name one GPU; gpu_uuid is set."""
    snapshot = _snapshot(("GPU-a", "00000000:18:00.0"), ("GPU-b", "00000000:3B:00.0"))
    merged = attach_kernel_xids(snapshot, [_kernel(79, spelling, T0)])
    assert merged.gpus[0].xid_events == []
    (event,) = merged.gpus[1].xid_events
    assert (event.xid, event.gpu_uuid, event.pci_bus_id) == (79, "GPU-b", spelling)
    assert merged.unattributed_xid_events == []
    assert snapshot.gpus[1].xid_events == []  # the input snapshot is left unchanged


def test_xids_for_gpus_not_listed_go_to_unattributed() -> None:
    """A GPU gone from NVML (fell off the bus) or a line without a PCI id: kept apart, never dropped."""
    earlier = _kernel(13, None, T0 - timedelta(hours=1))
    snapshot = _snapshot(("GPU-a", "00000000:18:00.0"), unattributed=[earlier])
    gone, no_pci = _kernel(79, "0000:3b:00", T0), _kernel(145, None, T0 - timedelta(minutes=5))
    merged = attach_kernel_xids(snapshot, [gone, no_pci])
    assert merged.gpus[0].xid_events == []
    assert [(e.xid, e.gpu_uuid) for e in merged.unattributed_xid_events] == [
        (13, None),
        (145, None),
        (79, None),
    ]


def test_per_gpu_lists_are_ordered_by_time_with_untimed_events_left_in_place() -> None:
    """Newest last among events with a time; a raw-dmesg event without time keeps its position."""
    snapshot = _snapshot(("GPU-a", "00000000:3B:00.0"))
    events = [
        _kernel(48, "0000:3b:00", T0 + timedelta(seconds=30)),
        _kernel(13, "0000:3b:00"),
        _kernel(63, "0000:3b:00", T0),
    ]
    merged = attach_kernel_xids(snapshot, events)
    assert [event.xid for event in merged.gpus[0].xid_events] == [63, 13, 48]


def test_the_nvml_report_of_the_same_fault_is_not_counted_twice() -> None:
    """Same XID, same GPU, within 2 s: one event (the NVML one), filled in with the kernel line's details."""
    snapshot = _snapshot(("GPU-a", "00000000:55:00.0"))
    snapshot = snapshot.model_copy(
        update={"gpus": [snapshot.gpus[0].model_copy(update={"xid_events": [_nvml(48, "GPU-a", T0)]})]}
    )
    kernel = _kernel(
        48,
        "0000:55:00",
        T0 + timedelta(seconds=1.5),
        pid=2187734,
        process_name="python",
        message="channel 0x00000002",
    )
    (event,) = attach_kernel_xids(snapshot, [kernel]).gpus[0].xid_events
    assert (event.source, event.at, event.pid, event.process_name, event.message) == (
        "nvml",
        T0,
        2187734,
        "python",
        "channel 0x00000002",
    )


@pytest.mark.parametrize(
    "kernel",
    [
        _kernel(48, "0000:55:00", T0 + timedelta(seconds=3)),  # a real repeat seconds later
        _kernel(63, "0000:55:00", T0),  # another XID at the same moment
        _kernel(48, "0000:55:00", None),  # no time: cannot be proven the same
    ],
)
def test_only_clearly_identical_events_are_merged(kernel: XidEvent) -> None:
    """Anything short of same XID + same GPU + both times within 2 s stays a separate event."""
    gpu = GpuSnapshot(
        index=0, uuid="GPU-a", pci_bus_id="00000000:55:00.0", xid_events=[_nvml(48, "GPU-a", T0)]
    )
    merged = attach_kernel_xids(NodeSnapshot(node="n", gpus=[gpu]), [kernel])
    assert [event.source for event in merged.gpus[0].xid_events] == ["nvml", "kernel_log"]


def test_one_nvml_event_absorbs_at_most_one_kernel_line() -> None:
    """Two kernel lines of XID 13 in the same second against one NVML event: one merge, one new event."""
    gpu = GpuSnapshot(
        index=0, uuid="GPU-a", pci_bus_id="00000000:CB:00.0", xid_events=[_nvml(13, "GPU-a", T0)]
    )
    lines = [
        _kernel(13, "0000:cb:00", T0, message="Graphics SM Warp Exception"),
        _kernel(13, "0000:cb:00", T0, message="ESR"),
    ]
    events = attach_kernel_xids(NodeSnapshot(node="n", gpus=[gpu]), lines).gpus[0].xid_events
    assert [(event.source, event.message) for event in events] == [
        ("nvml", "Graphics SM Warp Exception"),
        ("kernel_log", "ESR"),
    ]


def test_a_whole_fixture_log_lands_on_the_right_gpus() -> None:
    """journalctl-gb200-nvlink: four GPUs by PCI domain, none unattributed when all are listed."""
    snapshot = _snapshot(
        ("GPU-0", "00000008:01:00.0"),
        ("GPU-1", "00000009:01:00.0"),
        ("GPU-2", "00000018:01:00.0"),
        ("GPU-3", "00000019:01:00.0"),
    )
    merged = attach_kernel_xids(
        snapshot, read_kernel_log(LOGS / "journalctl-gb200-nvlink.txt", year_hint=2025)
    )
    assert [[event.xid for event in gpu.xid_events] for gpu in merged.gpus] == [
        [149],
        [149, 154, 45],
        [145, 45],
        [154],
    ]
    assert merged.unattributed_xid_events == []


# --- followers -----------------------------------------------------------------------------------------------

STOP_BOUND_S = 1.0


class Collector:
    """The followers' callback: records events and lets a test wait for a number of them."""

    def __init__(self) -> None:
        self.events: list[XidEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: XidEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def wait_for(self, count: int) -> list[XidEvent]:
        with self._changed:
            self._changed.wait_for(lambda: len(self.events) >= count, HANG_GUARD_S)
            return list(self.events)


def _stop_time(follower: KmsgFollower | JournalFollower) -> float:
    started = time.monotonic()
    follower.stop()
    return time.monotonic() - started


BOOT = datetime(2024, 8, 9, 13, 0, tzinfo=UTC)


def _clock_an_hour_after_boot() -> ManualClock:
    clock = ManualClock(start=BOOT)
    clock.advance(3600)
    return clock


def test_kmsg_follower_reads_records_from_the_start_and_dates_them_from_boot(tmp_path: Path) -> None:
    """from_start: every XID record in the buffer, at = boot time + the record's microseconds; SXid skipped."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes((LOGS / "kmsg-h100-xid79.txt").read_bytes())
    collector = Collector()
    follower = KmsgFollower(
        collector, path=str(kmsg), from_start=True, clock=_clock_an_hour_after_boot(), poll_interval=0.01
    )
    follower.start()
    events = collector.wait_for(3)
    assert _stop_time(follower) < STOP_BOUND_S and not follower.running
    assert [(event.xid, event.pci_bus_id, event.process_name) for event in events] == [
        (79, "0000:3b:00", None),
        (13, "0000:86:00", "träiner"),
        (154, "0000:86:00", None),
    ]
    assert events[0].at == BOOT + timedelta(microseconds=3021118829)


def test_kmsg_follower_starts_at_the_end_unless_asked(tmp_path: Path) -> None:
    """Default: records already in the buffer are skipped; records written after start are delivered."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes((LOGS / "kmsg-h100-xid79.txt").read_bytes())
    collector = Collector()
    with KmsgFollower(collector, path=str(kmsg), clock=_clock_an_hour_after_boot(), poll_interval=0.01):
        with kmsg.open("ab") as writer:
            writer.write(
                b"4,2042,3600000000,-;NVRM: Xid (PCI:0000:86:00): 48, pid=77, name=python, channel 0x2\n"
            )
        events = collector.wait_for(1)
    assert [(event.xid, event.pid, event.at) for event in events] == [(48, 77, BOOT + timedelta(hours=1))]


def test_kmsg_follower_reads_a_fifo_standing_in_for_dev_kmsg(tmp_path: Path) -> None:
    """A FIFO cannot seek; records written into it are delivered, including after the writer closes."""
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    collector = Collector()
    follower = KmsgFollower(collector, path=str(fifo), clock=_clock_an_hour_after_boot(), poll_interval=0.01)
    follower.start()
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    with fifo.open("wb") as writer:
        writer.write(b"6,1,1000,-;mlx5_core 0000:ab:00.0: link up\n")
        writer.write(
            b"4,2,2000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        )
    events = collector.wait_for(1)
    assert _stop_time(follower) < STOP_BOUND_S
    assert [(event.xid, event.message) for event in events] == [(79, "GPU has fallen off the bus.")]


class OverwrittenKmsg:
    """A stand-in for /dev/kmsg: one record per read, EPIPE once for records lost, None when nothing is ready."""

    def __init__(self, *records: bytes) -> None:
        self._reads: list[bytes | BrokenPipeError] = [BrokenPipeError(32, "Broken pipe"), *records]
        self.closed = False

    def read(self, size: int = -1, /) -> bytes | None:
        if not self._reads:
            return None
        item = self._reads.pop(0)
        if isinstance(item, BrokenPipeError):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


def test_kmsg_follower_counts_overwritten_records_and_reads_on() -> None:
    """EPIPE from /dev/kmsg means records were lost; the next read continues and is delivered."""
    source = OverwrittenKmsg(
        b"4,9001,5000000,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=5, name=nvidia-smi, Timeout\n"
    )
    collector = Collector()
    follower = KmsgFollower(
        collector, opener=lambda path: source, clock=_clock_an_hour_after_boot(), poll_interval=0.01
    )
    follower.start()
    events = collector.wait_for(1)
    assert _stop_time(follower) < STOP_BOUND_S
    assert [(event.xid, event.process_name) for event in events] == [(119, "nvidia-smi")]
    assert follower.lost_reads == 1 and source.closed


def test_a_failing_callback_does_not_end_the_follow() -> None:
    """The consumer raising on one event is logged; the next event is still delivered."""
    delivered: list[int] = []

    def flaky(event: XidEvent) -> None:
        delivered.append(event.xid)
        if len(delivered) == 1:
            raise RuntimeError("consumer bug")

    records = [
        f"4,{n},{n}000,-;NVRM: Xid (PCI:0000:3b:00): {xid}, x\n".encode() for n, xid in enumerate((13, 31), 1)
    ]
    source = OverwrittenKmsg(*records)
    follower = KmsgFollower(flaky, opener=lambda path: source, poll_interval=0.01)
    follower.start()
    wait_until(lambda: len(delivered) >= 2)
    follower.stop()
    assert delivered == [13, 31]


def test_kmsg_follower_on_an_unreadable_path_fails_at_start(tmp_path: Path) -> None:
    """The error reaches the caller of start(), naming the path."""
    with pytest.raises(KernelLogError, match="no-kmsg"):
        KmsgFollower(Collector(), path=str(tmp_path / "no-kmsg")).start()


FAKE_JOURNALCTL = """#!{python}
import os, sys, time
with open({runs!r}, "a") as runs:
    runs.write(f"{{os.getpid()}} {{' '.join(sys.argv[1:])}}\\n")
with open({entries!r}) as entries:
    for line in entries:
        sys.stdout.write(line)
        sys.stdout.flush()
if {exit_after_output}:
    sys.exit(1)
time.sleep(60)
"""


def _fake_journalctl(
    directory: Path, *, exit_after_output: bool, name: str = "fake-journalctl"
) -> tuple[Path, Path]:
    """A journalctl stand-in that prints the recorded JSON entries, then follows (sleeps) or exits."""
    runs = directory / "runs.txt"
    script = directory / name
    script.write_text(
        FAKE_JOURNALCTL.format(
            python=sys.executable,
            runs=str(runs),
            entries=str(LOGS / "journal-h100-xid.jsonl"),
            exit_after_output=exit_after_output,
        )
    )
    script.chmod(0o755)
    return script, runs


def _run_lines(runs: Path) -> list[tuple[int, str]]:
    return [
        (int(pid), args) for pid, _, args in (line.partition(" ") for line in runs.read_text().splitlines())
    ]


def test_journal_follower_delivers_entries_and_terminates_journalctl_on_stop(tmp_path: Path) -> None:
    """Kernel entries' XIDs with their journald times; on stop journalctl is terminated within a second."""
    script, runs = _fake_journalctl(tmp_path, exit_after_output=False)
    collector = Collector()
    follower = JournalFollower(collector, command=(str(script),))
    follower.start()
    events = collector.wait_for(3)
    assert _stop_time(follower) < STOP_BOUND_S and not follower.running
    assert [(event.xid, event.at) for event in events] == [
        (79, datetime(2024, 8, 9, 14, 21, 55, 230124, tzinfo=UTC)),
        (13, datetime(2024, 8, 9, 14, 22, 1, 231737, tzinfo=UTC)),
        (154, datetime(2024, 8, 9, 14, 22, 3, 295312, tzinfo=UTC)),
    ]
    ((pid, _),) = _run_lines(runs)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # terminated and reaped, not left behind


def test_journal_follower_restarts_journalctl_when_it_exits(tmp_path: Path) -> None:
    """journalctl exiting (journald restart, rotation) is followed by a new run after the backoff delay."""
    script, runs = _fake_journalctl(tmp_path, exit_after_output=True)
    collector = Collector()
    follower = JournalFollower(collector, command=(str(script),), restart_delay=0.01, max_restart_delay=0.05)
    follower.start()
    events = collector.wait_for(6)
    follower.stop()
    assert [event.xid for event in events[:6]] == [79, 13, 154, 79, 13, 154]
    assert follower.restarts >= 1 and len(_run_lines(runs)) >= 2


def test_journal_follower_runs_journalctl_from_path_with_the_default_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default command: journalctl -k -f -o json -n 0, found on PATH, run without a shell."""
    _fake_journalctl(tmp_path, exit_after_output=False, name="journalctl")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    collector = Collector()
    with JournalFollower(collector):
        collector.wait_for(1)
    ((_, args),) = _run_lines(tmp_path / "runs.txt")
    assert args == "-k -f -o json -n 0"


def test_journal_follower_without_journalctl_fails_at_start() -> None:
    """A node without journalctl is a clear KernelLogError, not a silent thread that never delivers."""
    with pytest.raises(KernelLogError, match="no-such-journalctl"):
        JournalFollower(Collector(), command=("no-such-journalctl",)).start()
