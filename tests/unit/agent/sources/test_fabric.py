"""The agent's fabric parts: readings added to each snapshot, kernel-log lines buffered between snapshots,
and the trends' memory kept between passes."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from waiting import wait_until

from agent.backends.kernel_log import JournalFollower, KmsgFollower
from agent.backends.nvml.backend import NvmlBackend
from agent.sources.fabric import FabricSource, FabricTrends
from checks.config import ChecksConfig
from core.snapshot import LinkEvent, SxidEvent, XidEvent
from sim.fakes.infiniband import FakeInfiniband
from sim.fakes.nvml import FakeNvml


def test_each_snapshot_carries_the_ports_and_the_lines_since_the_previous_one(tmp_path: Path) -> None:
    fake = FakeInfiniband(tmp_path / "ib", devices=2)
    source = FabricSource(NvmlBackend(FakeNvml(seed=1), node_name="n"), sysfs_root=tmp_path / "ib")
    first = source.snapshot()
    assert first.fabric is not None and [p.device for p in first.fabric.ib_ports or []] == [
        "mlx5_0",
        "mlx5_1",
    ]
    xids: list[XidEvent] = []
    lines = (
        b"3,1,100,-;mlx5_core 0000:01:00.0 enp1s0f0np0: Link down\n"
        b"4,2,200,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n"
        b"3,3,300,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    )
    records = io.BytesIO(lines)
    follower = KmsgFollower(
        xids.append,
        from_start=True,
        opener=lambda _path: _Records(records),
        fabric=source.events.push,
    )
    with follower:
        assert wait_until(lambda: len(xids) == 1)
    fake.port_down("mlx5_1")
    second = source.snapshot()
    assert second.fabric is not None
    assert [(e.netdev, e.up) for e in second.fabric.link_events] == [("enp1s0f0np0", False)]
    assert [(e.sxid, e.severity) for e in second.fabric.sxid_events] == [(20034, "fatal")]
    assert [p.state for p in second.fabric.ib_ports or []] == ["4: ACTIVE", "1: DOWN"]
    third = source.snapshot()
    assert third.fabric is not None and third.fabric.link_events == [] and third.fabric.sxid_events == []


def test_the_trends_remember_counters_between_passes(tmp_path: Path) -> None:
    fake = FakeInfiniband(tmp_path / "ib", devices=2)
    source = FabricSource(NvmlBackend(FakeNvml(seed=1), node_name="n"), sysfs_root=tmp_path / "ib")
    trends = FabricTrends(ChecksConfig())
    assert trends.findings(source.snapshot()) == []
    fake.flap("mlx5_0", times=3)
    assert [f.code for f in trends.findings(source.snapshot())] == ["IB_LINK_FLAP"]
    fake.remove_device("mlx5_1")
    assert "IB_DEVICE_MISSING" in [f.code for f in trends.findings(source.snapshot())]


def test_the_journal_follower_hands_fabric_lines_to_the_fabric_callback(tmp_path: Path) -> None:
    """journalctl -o json entries: the SXid and the link line go to the fabric callback, XIDs stay XIDs."""
    entries = [
        {"MESSAGE": "mlx5_core 0000:01:00.1 enp1s0f1np1: Link down", "_TRANSPORT": "kernel"},
        {
            "MESSAGE": "nvidia-nvswitch2: SXid (PCI:0000:8a:00.0): 12028, Non-fatal, Link 61 egress non-posted "
            "PRIV error (First)",
            "_TRANSPORT": "kernel",
        },
    ]
    script = tmp_path / "entries.py"
    script.write_text("".join(f"print({json.dumps(json.dumps(entry))})\n" for entry in entries))
    source = FabricSource(NvmlBackend(FakeNvml(seed=1), node_name="n"), sysfs_root=tmp_path / "none")
    received: list[SxidEvent | LinkEvent] = []

    def push(event: SxidEvent | LinkEvent) -> None:
        received.append(event)
        source.events.push(event)

    follower = JournalFollower(
        lambda _xid: None, command=(sys.executable, str(script)), restart_delay=30.0, fabric=push
    )
    with follower:
        assert wait_until(lambda: len(received) == 2)
    fabric = source.snapshot().fabric
    assert fabric is not None and fabric.ib_ports is None
    assert [(e.netdev, e.up) for e in fabric.link_events] == [("enp1s0f1np1", False)]
    assert [(e.sxid, e.severity) for e in fabric.sxid_events] == [(12028, "non-fatal")]


class _Records:
    """A record source that hands out one line per read, then nothing (like a quiet /dev/kmsg)."""

    def __init__(self, data: io.BytesIO) -> None:
        self._data = data

    def read(self, size: int = -1, /) -> bytes | None:
        line = self._data.readline()
        return line or None

    def close(self) -> None:
        self._data.close()
