"""Builders for snapshots in the checks tests: a fully healthy GPU to start from, and small helpers.

Everything goes through the real snapshot models (validated), so a test cannot build a snapshot the
agent could never write.
"""

from __future__ import annotations

from typing import Any

from core.snapshot import SNAPSHOT_SCHEMA, GpuSnapshot, NodeSnapshot, XidEvent


def healthy_gpu_fields(index: int = 0) -> dict[str, Any]:
    """The readings of an idle, healthy H100 SXM (as dict, to be changed by a test before validation)."""
    return {
        "index": index,
        "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "lost": False,
        "persistence_mode": True,
        "temperature_c": 33,
        "memory_temperature_c": 31,
        "power_w": 71.5,
        "power_limit_w": 700.0,
        "clocks_event_reasons": 1,
        "ecc": {
            "enabled": True,
            "volatile_uncorrected": 0,
            "aggregate_uncorrected": 0,
            "volatile_corrected": 0,
            "aggregate_corrected": 0,
        },
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": None,
        "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "replay_counter": 0},
        "nvlink": [
            {"link": link, "active": True, "replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
            for link in range(18)
        ],
        "recovery_action": 0,
        "xid_events": [],
    }


def gpu(index: int = 0, **changes: Any) -> GpuSnapshot:
    """A healthy GPU with the given fields replaced (nested groups replaced whole)."""
    fields = healthy_gpu_fields(index)
    fields.update(changes)
    return GpuSnapshot.model_validate(fields)


def bare_gpu(index: int = 0, **fields: Any) -> GpuSnapshot:
    """A GPU with only index and uuid (every reading null) plus the given fields."""
    return GpuSnapshot.model_validate({"index": index, "uuid": f"GPU-bare-{index}", **fields})


def node(*gpus: GpuSnapshot, **fields: Any) -> NodeSnapshot:
    """A snapshot of node ``n1`` holding the given GPUs."""
    data: dict[str, Any] = {"schema": SNAPSHOT_SCHEMA, "node": "n1", "gpus": [g.model_dump() for g in gpus]}
    data.update(fields)
    return NodeSnapshot.model_validate(data)


def xid(code: int, source: str = "nvml", message: str | None = None, **fields: Any) -> dict[str, Any]:
    """One XID event as the snapshot stores it (a dict, ready for ``xid_events=[...]``)."""
    return XidEvent.model_validate({"xid": code, "source": source, "message": message, **fields}).model_dump()


def gpu_with_xids(*events: dict[str, Any], index: int = 0, **changes: Any) -> GpuSnapshot:
    """A healthy GPU that saw the given XID events."""
    return gpu(index, xid_events=list(events), **changes)
