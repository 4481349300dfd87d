"""A pooled fleet's fake NVML: its XID watcher wakes less often when idle, yet an XID still ends the wait."""

from __future__ import annotations

import threading
import time

import pynvml
import pytest

from agent.backends.nvml import seam as nvml
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
    library, event_set = watched()
    began = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        library.nvmlEventSetWait(event_set, 200)
    assert POOLED_EVENT_WAIT_MS / 1000 - 0.05 <= time.monotonic() - began < 5.0


def test_an_xid_after_the_watchers_short_wait_still_ends_the_same_wait() -> None:
    """The XID comes 0.3 s into a wait asked for 0.2 s: one wait, ended by the XID, not a timeout."""
    library, event_set = watched()
    threading.Timer(0.3, library.inject_xid, args=(0, 79)).start()
    data = library.nvmlEventSetWait(event_set, 200)
    assert data.eventData == 79


def test_the_pooled_wait_stays_under_the_watchers_stop_join() -> None:
    """The watcher's stop() joins for 1 s: a longer wait would leave its event set unfreed."""
    assert POOLED_EVENT_WAIT_MS < 1000
