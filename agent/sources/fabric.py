"""The fabric half of the agent: fabric readings added to each snapshot, and the memory the trends need.

:class:`FabricSource` wraps the NVML backend: each snapshot gets ``fabric`` (the InfiniBand / RoCE ports
read from sysfs now, and the NVSwitch SXid and NIC link lines the kernel-log follower pushed into the
:class:`FabricEvents` buffer since the previous snapshot). :class:`FabricTrends` is a finding source that
keeps :class:`checks.fabric.FabricMemory` between passes and hands it to the pure
:func:`checks.fabric.judge_fabric_trends` (link flaps, error-counter rates, vanished devices).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agent.backends.infiniband import read_ib_ports
from checks.config import ChecksConfig
from checks.fabric import FabricMemory, judge_fabric_trends
from core.findings import Finding
from core.snapshot import FabricReadings, LinkEvent, NodeSnapshot, SxidEvent

if TYPE_CHECKING:
    from agent.loop import SnapshotSource

MAX_BUFFERED = 1000  # events kept between two snapshots; a storm beyond this keeps the newest


class FabricEvents:
    """SXid and link lines from the kernel-log follower's thread, taken by the next snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sxids: list[SxidEvent] = []
        self._links: list[LinkEvent] = []

    def push(self, event: SxidEvent | LinkEvent) -> None:
        """Keep one event (the follower's fabric callback)."""
        with self._lock:
            if isinstance(event, SxidEvent):
                self._sxids.append(event)
                del self._sxids[:-MAX_BUFFERED]
            else:
                self._links.append(event)
                del self._links[:-MAX_BUFFERED]

    def take(self) -> tuple[list[SxidEvent], list[LinkEvent]]:
        """Every event since the last call, oldest first."""
        with self._lock:
            sxids, links = self._sxids, self._links
            self._sxids, self._links = [], []
        return sxids, links


class FabricSource:
    """A snapshot source that adds the fabric readings to the inner source's snapshot."""

    def __init__(
        self, inner: SnapshotSource, *, sysfs_root: Path, events: FabricEvents | None = None
    ) -> None:
        self._inner = inner
        self._root = sysfs_root
        self.events = events if events is not None else FabricEvents()

    def snapshot(self) -> NodeSnapshot:
        """The inner snapshot with ``fabric`` filled (ports now, events since the previous snapshot)."""
        snapshot = self._inner.snapshot()
        sxids, links = self.events.take()
        readings = FabricReadings(ib_ports=read_ib_ports(self._root), link_events=links, sxid_events=sxids)
        return snapshot.model_copy(update={"fabric": readings})


class FabricTrends:
    """Finding source: flaps, error rates and vanished devices, judged with the memory of earlier passes."""

    def __init__(self, checks: ChecksConfig) -> None:
        self._checks = checks
        self._lock = threading.Lock()
        self.memory = FabricMemory()

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]:
        """This pass's trend findings; the memory moves on (never raises for a snapshot without fabric)."""
        with self._lock:
            findings, self.memory = judge_fabric_trends(snapshot, self._checks, self.memory)
        return findings
