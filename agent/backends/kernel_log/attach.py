"""Merge kernel-log XIDs into a snapshot: each on its GPU (matched by PCI address), the rest apart.

Why de-duplicate against NVML at all: the driver raises the NVML XID event and prints the kernel line
for the same fault, so an agent reading both would count one XID twice and trip repeat-count rules
("two XID 13 on one GPU") on a single fault. Why only "clearly the same" (same XID, same GPU, both times
known and within 2 s): a GPU that really repeats an XID seconds later must keep both, and a kernel line
without a time cannot be proven to be the NVML event, so it is kept. A kernel line absorbed this way still
adds what NVML does not know (pid, process name, the driver's message) to the NVML event.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from core.snapshot import NodeSnapshot, XidEvent

SAME_EVENT_WINDOW = timedelta(seconds=2)
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_DETAIL_FIELDS = ("message", "pid", "process_name", "pci_bus_id")


def attach_kernel_xids(snapshot: NodeSnapshot, events: Iterable[XidEvent]) -> NodeSnapshot:
    """A new snapshot with each event on its GPU's ``xid_events`` (``gpu_uuid`` set), others unattributed.

    An event belongs to the listed GPU whose PCI address has the same :func:`pci_key` (any spelling);
    events naming no listed GPU (GPU gone from NVML, no PCI address) go to ``unattributed_xid_events``.
    Lists stay ordered by time where known, newest last.
    """
    by_gpu: dict[int, list[XidEvent]] = {}
    unattributed: list[XidEvent] = []
    for event in events:
        position = snapshot.owner_of(event)
        if position is None:
            unattributed.append(event)
        else:
            by_gpu.setdefault(position, []).append(
                event.model_copy(update={"gpu_uuid": snapshot.gpus[position].uuid})
            )
    gpus = [
        gpu
        if position not in by_gpu
        else gpu.model_copy(update={"xid_events": _merge(gpu.xid_events, by_gpu[position])})
        for position, gpu in enumerate(snapshot.gpus)
    ]
    others = order_by_time([*snapshot.unattributed_xid_events, *unattributed])
    return snapshot.model_copy(update={"gpus": gpus, "unattributed_xid_events": others})


def order_by_time(events: Sequence[XidEvent]) -> list[XidEvent]:
    """Timed events sorted among themselves (stable, newest last); untimed events keep their place."""
    timed_slots = [index for index, event in enumerate(events) if event.at is not None]
    timed = sorted((events[index] for index in timed_slots), key=_time_key)
    ordered = list(events)
    for slot, event in zip(timed_slots, timed, strict=True):
        ordered[slot] = event
    return ordered


def _merge(existing: Sequence[XidEvent], incoming: Sequence[XidEvent]) -> list[XidEvent]:
    merged = list(existing)
    absorbed: set[int] = set()
    for event in incoming:
        twin = _nvml_twin(merged, event, absorbed)
        if twin is None:
            merged.append(event)
        else:
            absorbed.add(twin)
            merged[twin] = _enriched(merged[twin], event)
    return order_by_time(merged)


def _nvml_twin(events: Sequence[XidEvent], event: XidEvent, absorbed: set[int]) -> int | None:
    """The index of the not-yet-matched NVML event that is clearly the same fault as ``event``."""
    if event.at is None:
        return None
    for index, candidate in enumerate(events):
        if (
            index not in absorbed
            and candidate.source == "nvml"
            and candidate.xid == event.xid
            and candidate.at is not None
            and abs(_time_key(candidate) - _time_key(event)) <= SAME_EVENT_WINDOW
        ):
            return index
    return None


def _enriched(nvml_event: XidEvent, kernel_event: XidEvent) -> XidEvent:
    missing = {
        field: getattr(kernel_event, field)
        for field in _DETAIL_FIELDS
        if getattr(nvml_event, field) is None and getattr(kernel_event, field) is not None
    }
    return nvml_event.model_copy(update=missing) if missing else nvml_event


def _time_key(event: XidEvent) -> datetime:
    """The event's time as aware UTC (a naive time, allowed in a snapshot file, is read as UTC).

    Only called for events that have a time; the fallback keeps the function total.
    """
    moment = event.at or _EARLIEST
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
