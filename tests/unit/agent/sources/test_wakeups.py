"""What wakes the loop: NVML XID events and kernel-log XID lines, merged into the next snapshot once each."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from waiting import HANG_GUARD_S

from agent.backends.kernel_log import KernelLogError, KmsgFollower, RecordSource
from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.xid_watcher import XidBuffer, XidWatcher
from agent.sources.wakeups import XidCallback, XidFeed
from core.clock import RealClock
from core.snapshot import NodeSnapshot
from sim.fakes.nvml import FakeNvml

GPU3_PCI_KMSG = "0000:5d:00"  # how the driver spells GPU 3's address (00000000:5D:00.0 in NVML)


class FakeKmsg:
    """A stand-in for /dev/kmsg: records written by the test are read one per call, None when none is ready."""

    def __init__(self) -> None:
        self._records: list[bytes] = []
        self._lock = threading.Lock()

    def write_xid(self, xid: int, text: str = "GPU has fallen off the bus.") -> None:
        """A kernel record stamped now (microseconds since boot, as the kernel does)."""
        stamp = int(time.monotonic() * 1_000_000)
        record = f"4,1,{stamp},-;NVRM: Xid (PCI:{GPU3_PCI_KMSG}): {xid}, pid=1, name=python, {text}\n"
        with self._lock:
            self._records.append(record.encode())

    def read(self, size: int = -1, /) -> bytes | None:
        with self._lock:
            return self._records.pop(0) if self._records else None

    def close(self) -> None:
        """Nothing to release."""


class Rig:
    def __init__(self, *, kernel_source: RecordSource | None) -> None:
        self.nvml = FakeNvml("h100_sxm", 8, seed=3, node_name="node-1")
        self.wake = threading.Event()
        buffer = XidBuffer()
        self.backend = NvmlBackend(self.nvml, node_name="node-1", xid_buffer=buffer)

        def follower(callback: XidCallback) -> KmsgFollower:
            def opener(path: str) -> RecordSource:
                if kernel_source is None:
                    raise KernelLogError(f"{path}: cannot read kernel log: Permission denied")
                return kernel_source

            return KmsgFollower(callback, opener=opener, clock=RealClock(), poll_interval=0.01)

        self.feed = XidFeed(
            wake=self.wake,
            nvml_buffer=buffer,
            watcher_factory=lambda sink: XidWatcher(self.nvml, sink=sink, timeout_ms=20),
            follower_factory=follower,
        )

    def snapshot(self) -> NodeSnapshot:
        return self.feed.merge_kernel_events(self.backend.snapshot())


@pytest.fixture
def kmsg() -> FakeKmsg:
    return FakeKmsg()


@pytest.fixture
def rig(kmsg: FakeKmsg) -> Iterator[Rig]:
    made = Rig(kernel_source=kmsg)
    made.feed.start()
    yield made
    made.feed.stop()
    made.backend.close()


def test_a_kernel_log_xid_wakes_the_loop_and_lands_on_its_gpu_by_pci_address(
    rig: Rig, kmsg: FakeKmsg
) -> None:
    kmsg.write_xid(79)
    assert rig.wake.wait(HANG_GUARD_S), "the kernel-log XID did not wake the loop"
    snapshot = rig.snapshot()
    events = snapshot.gpus[3].xid_events
    assert [(event.xid, event.source) for event in events] == [(79, "kernel_log")]
    assert events[0].gpu_uuid == snapshot.gpus[3].uuid


def test_one_fault_reported_by_nvml_and_the_kernel_log_counts_once(rig: Rig, kmsg: FakeKmsg) -> None:
    """The driver raises the NVML event and prints the kernel line for the same XID: one event, enriched
    with what only the kernel line knows (the process)."""
    assert rig.feed.watching
    rig.nvml.inject_xid(3, 79)
    assert rig.wake.wait(HANG_GUARD_S), "the NVML XID did not wake the loop"
    rig.wake.clear()
    kmsg.write_xid(79)
    assert rig.wake.wait(HANG_GUARD_S), "the kernel-log XID did not wake the loop"

    events = rig.snapshot().gpus[3].xid_events

    assert [(event.xid, event.source, event.process_name) for event in events] == [(79, "nvml", "python")]


def test_an_unreadable_kernel_log_is_logged_and_nvml_events_still_wake_the_loop() -> None:
    rig = Rig(kernel_source=None)
    rig.feed.start()
    try:
        assert rig.feed.watching
        rig.nvml.inject_xid(0, 48)
        assert rig.wake.wait(HANG_GUARD_S)
        assert [event.xid for event in rig.snapshot().gpus[0].xid_events] == [48]
    finally:
        rig.feed.stop()
        rig.backend.close()


def test_stop_ends_the_watcher_and_the_follower(rig: Rig) -> None:
    assert rig.feed.watching
    rig.feed.stop()
    assert not rig.feed.watching
    assert not any(thread.name.startswith("kmsg-follower") for thread in threading.enumerate())
