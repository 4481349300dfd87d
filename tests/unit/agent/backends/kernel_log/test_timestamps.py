"""Kernel-log time stamps (agent/backends/kernel_log/timestamps.py): every prefix, yearless dates, bad dates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.backends.kernel_log import (
    parse_xid_line,
)


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
