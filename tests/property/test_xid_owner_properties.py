"""Which GPU an XID belongs to is decided once: NVML's path, the kernel log's and the checks' agree.

Three paths attribute an XID to a GPU: the NVML backend (its event buffer), the kernel-log attach (a line's
PCI address) and the XID check (an unattributed event that names a listed GPU). Whatever the event names —
a UUID, a PCI address in any spelling, both (even naming two different GPUs), or nothing listed — all three
land it on the same GPU, or none.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.backends.kernel_log import attach_kernel_xids
from agent.backends.nvml.backend import attach_xids
from checks.config import ChecksConfig
from checks.xid import check_xid
from core.snapshot import GpuSnapshot, NodeSnapshot, XidEvent

BUSES = [0x18, 0x2A, 0x3B, 0x5D, 0x9A]


def _spellings(bus: int) -> list[str]:
    """The ways sources print one GPU's address: NVML, the kernel's NVRM lines, tools without a domain."""
    return [f"00000000:{bus:02X}:00.0", f"0000:{bus:02x}:00", f"{bus:02x}:00.0", f"0000:{bus:02X}:00.1"]


@st.composite
def gpus_and_event(draw: st.DrawFn) -> tuple[list[GpuSnapshot], XidEvent]:
    buses = draw(st.lists(st.sampled_from(BUSES), min_size=1, max_size=4, unique=True))
    gpus = [
        GpuSnapshot(index=index, uuid=f"GPU-{bus:02x}", pci_bus_id=f"00000000:{bus:02X}:00.0")
        for index, bus in enumerate(buses)
    ]
    uuid = draw(st.none() | st.sampled_from([f"GPU-{bus:02x}" for bus in BUSES] + ["GPU-gone"]))
    address = draw(st.none() | st.sampled_from(BUSES).flatmap(lambda bus: st.sampled_from(_spellings(bus))))
    event = XidEvent(xid=79, source="dcgm", gpu_uuid=uuid, pci_bus_id=address)
    return gpus, event


def _nvml_owner(gpus: list[GpuSnapshot], event: XidEvent) -> str | None:
    attached, _ = attach_xids(gpus, [event])
    return next((gpu.uuid for gpu in attached if gpu.xid_events), None)


def _kernel_log_owner(gpus: list[GpuSnapshot], event: XidEvent) -> str | None:
    snapshot = attach_kernel_xids(NodeSnapshot(node="n", gpus=gpus), [event])
    return next((gpu.uuid for gpu in snapshot.gpus if gpu.xid_events), None)


def _check_owner(gpus: list[GpuSnapshot], event: XidEvent) -> str | None:
    snapshot = NodeSnapshot(node="n", gpus=gpus, unattributed_xid_events=[event])
    (finding,) = check_xid(snapshot, ChecksConfig())
    listed = {gpu.uuid for gpu in gpus}
    return finding.gpu if finding.gpu in listed else None


@settings(max_examples=400, deadline=None)
@given(gpus_and_event())
def test_the_three_paths_agree_on_the_owner_of_an_xid(case: tuple[list[GpuSnapshot], XidEvent]) -> None:
    gpus, event = case
    owners = {_nvml_owner(gpus, event), _kernel_log_owner(gpus, event), _check_owner(gpus, event)}
    assert len(owners) == 1, (event, owners)
    snapshot = NodeSnapshot(node="n", gpus=gpus)
    position = snapshot.owner_of(event)
    assert owners == {None if position is None else gpus[position].uuid}


def test_a_uuid_and_an_address_naming_two_gpus_resolve_to_the_uuids() -> None:
    """The case the three paths used to disagree on: the UUID names one chip for its life, the address a slot."""
    gpus = [
        GpuSnapshot(index=0, uuid="GPU-18", pci_bus_id="00000000:18:00.0"),
        GpuSnapshot(index=1, uuid="GPU-3b", pci_bus_id="00000000:3B:00.0"),
    ]
    event = XidEvent(xid=79, source="dcgm", gpu_uuid="GPU-18", pci_bus_id="0000:3b:00")
    assert _nvml_owner(gpus, event) == _kernel_log_owner(gpus, event) == _check_owner(gpus, event) == "GPU-18"
