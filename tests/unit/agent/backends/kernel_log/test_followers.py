"""Live kernel-log followers (agent/backends/kernel_log/followers.py): /dev/kmsg and journalctl."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from repo_paths import FIXTURES
from waiting import HANG_GUARD_S, wait_until

from agent.backends.kernel_log import (
    JournalFollower,
    KernelLogError,
    KmsgFollower,
)
from core.clock import ManualClock
from core.snapshot import LinkEvent, SxidEvent, XidEvent

LOGS = FIXTURES / "kernel_logs"


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
    directory: Path,
    *,
    exit_after_output: bool,
    name: str = "fake-journalctl",
    entries: Path = LOGS / "journal-h100-xid.jsonl",
) -> tuple[Path, Path]:
    """A journalctl stand-in that prints the recorded JSON entries, then follows (sleeps) or exits."""
    runs = directory / "runs.txt"
    script = directory / name
    script.write_text(
        FAKE_JOURNALCTL.format(
            python=sys.executable,
            runs=str(runs),
            entries=str(entries),
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


# --- quoted fabric lines -----------------------------------------------------------------------------------

FABRIC = FIXTURES / "fabric"


class FabricCollector:
    """The followers' fabric callback: the SXid and link events, waitable."""

    def __init__(self) -> None:
        self.events: list[SxidEvent | LinkEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: SxidEvent | LinkEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def settle(self, count: int, quiet_s: float = 0.3) -> list[SxidEvent | LinkEvent]:
        """At least ``count`` events, then nothing more for ``quiet_s`` (no late quote slips in)."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.events) >= count, HANG_GUARD_S)
        time.sleep(quiet_s)
        with self._changed:
            return list(self.events)


def _kinds(events: list[SxidEvent | LinkEvent]) -> list[str]:
    return [
        f"sxid {e.sxid}" if isinstance(e, SxidEvent) else f"link {'up' if e.up else 'down'}" for e in events
    ]


def test_journal_follower_passes_only_the_kernels_fabric_entries(tmp_path: Path) -> None:
    """Entries from logger (_TRANSPORT=syslog), a service's stdout or the journal API quote; never delivered."""
    script, _ = _fake_journalctl(
        tmp_path, exit_after_output=False, entries=FABRIC / "journal-quoted-fabric-lines.jsonl"
    )
    fabric = FabricCollector()
    with JournalFollower(Collector(), command=(str(script),), fabric=fabric):
        events = fabric.settle(2)
    assert _kinds(events) == ["sxid 24007", "link down"]


def test_kmsg_follower_passes_only_records_the_kernel_wrote(tmp_path: Path) -> None:
    """A record a program wrote into /dev/kmsg has a user facility (12 = LOG_USER|warning): not delivered."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes((FABRIC / "kmsg-quoted-fabric-lines.txt").read_bytes())
    fabric = FabricCollector()
    follower = KmsgFollower(
        Collector(),
        path=str(kmsg),
        from_start=True,
        clock=_clock_an_hour_after_boot(),
        poll_interval=0.01,
        fabric=fabric,
    )
    with follower:
        events = fabric.settle(2)
    assert _kinds(events) == ["sxid 24007", "link down"]
