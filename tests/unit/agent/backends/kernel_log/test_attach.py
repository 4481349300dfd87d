"""Kernel-log XIDs attached to a snapshot (agent/backends/kernel_log/attach.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from repo_paths import FIXTURES

from agent.backends.kernel_log import (
    attach_kernel_xids,
    read_kernel_log,
)
from core.snapshot import GpuSnapshot, NodeSnapshot, XidEvent

LOGS = FIXTURES / "kernel_logs"


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
