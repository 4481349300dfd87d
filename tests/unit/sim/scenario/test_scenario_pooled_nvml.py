"""A pooled fleet's fake NVML: its XID watcher wakes less often when idle, yet an XID still ends the wait."""

from __future__ import annotations

import queue
import threading
import time

import pynvml

from agent.backends.nvml import seam as nvml
from agent.backends.nvml.xid_watcher import XidWatcher
from sim.fakes.structs import FakeEventSet
from sim.scenario.agents import POOLED_EVENT_WAIT_MS, PooledFleetNvml


def watched() -> tuple[PooledFleetNvml, FakeEventSet]:
    library = PooledFleetNvml("h100_sxm", 8, seed=0, node_name="gpu-node-0")
    library.nvmlInit()
    event_set = library.nvmlEventSetCreate()
    handle = library.nvmlDeviceGetHandleByIndex(0)
    library.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
    return library, event_set


def test_an_idle_wait_lasts_the_pooled_wait_not_the_watchers_short_one() -> None:
    """Asked for 0.2 s, the wait is still going 1 s later (the pooled wait is half a minute)."""
    library, event_set = watched()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            library.nvmlEventSetWait(event_set, 200)
        except pynvml.NVMLError as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and outcome == []
    library.interrupt_waits()
    waiter.join(5.0)
    assert not waiter.is_alive()
    assert [type(exc) for exc in outcome] == [pynvml.NVMLError_Uninitialized]
    assert POOLED_EVENT_WAIT_MS >= 10_000


def test_an_xid_after_the_watchers_short_wait_still_ends_the_same_wait() -> None:
    """The XID comes 0.3 s into a wait asked for 0.2 s: one wait, ended by the XID, not a timeout."""
    library, event_set = watched()
    threading.Timer(0.3, library.inject_xid, args=(0, 79)).start()
    data = library.nvmlEventSetWait(event_set, 200)
    assert data.eventData == 79


def test_stopping_a_pooled_fleet_ends_every_xid_watcher_at_once() -> None:
    """The watchers wait half a minute per call; the fleet's stop interrupts them first, so each watcher's
    stop (a 1 s join) finds its thread ended and frees its event set."""
    nodes = []
    for number in range(3):
        library = PooledFleetNvml("h100_sxm", 2, seed=number, node_name=f"gpu-node-{number}")
        watcher = XidWatcher(library, sink=queue.Queue(), timeout_ms=100)
        watcher.start()
        nodes.append((library, watcher))
    time.sleep(0.3)  # every watcher is inside its long wait
    for library, _ in nodes:
        library.interrupt_waits()
    began = time.monotonic()
    assert all(watcher.stop() for _, watcher in nodes)
    assert time.monotonic() - began < 3.0
