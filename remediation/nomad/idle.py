"""Is the Nomad node idle? Its live allocations holding NVIDIA GPUs, read once when a deep diagnostic is due.

One ``GET /v1/node/:id/allocations`` (through ``remediation.nomad.api.NomadApi``), never per tick. An
allocation holds GPUs when it is live (desired ``run``, client status ``pending`` or ``running``: a
pending one is already placed here and will start) and either the scheduler gave one of its tasks NVIDIA
GPU instances (``AllocatedResources.Tasks.*.Devices``) or its job's task asks for them
(``Resources.Devices`` named ``gpu``, ``nvidia/gpu`` or ``nvidia/gpu/<model>`` with a count above zero).
Both are read because either may be absent from an answer; a GPU asked for counts as held (safe side).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

JsonObject = dict[str, Any]

GPU_VENDOR = "nvidia"
GPU_TYPE = "gpu"
_LIVE_CLIENT_STATUSES = frozenset({"pending", "running"})


def gpu_allocations(allocations: Iterable[JsonObject]) -> list[str]:
    """``namespace/name`` of every live allocation that holds GPUs, in the order given."""
    return [_allocation_name(alloc) for alloc in allocations if holds_gpus(alloc)]


def holds_gpus(alloc: JsonObject) -> bool:
    """A live allocation that was given, or whose tasks ask for, at least one NVIDIA GPU."""
    if not is_live(alloc):
        return False
    return _allocated_gpus(alloc) or _requested_gpus(alloc)


def is_live(alloc: JsonObject) -> bool:
    """Placed here and not finished: desired ``run`` and the client still pending or running it."""
    return alloc.get("DesiredStatus") == "run" and alloc.get("ClientStatus") in _LIVE_CLIENT_STATUSES


def is_gpu_device_name(name: str) -> bool:
    """Nomad's device names: ``TYPE``, ``VENDOR/TYPE`` or ``VENDOR/TYPE/MODEL``; a bare ``gpu`` may be
    ours, so it counts."""
    parts = name.lower().split("/")
    if len(parts) == 1:
        return parts[0] == GPU_TYPE
    return parts[0] == GPU_VENDOR and parts[1] == GPU_TYPE


def _allocated_gpus(alloc: JsonObject) -> bool:
    tasks = (alloc.get("AllocatedResources") or {}).get("Tasks") or {}
    for task in tasks.values():
        for device in (task or {}).get("Devices") or []:
            vendor, kind = str(device.get("Vendor", "")).lower(), str(device.get("Type", "")).lower()
            if vendor == GPU_VENDOR and kind == GPU_TYPE and device.get("DeviceIDs"):
                return True
    return False


def _requested_gpus(alloc: JsonObject) -> bool:
    job = alloc.get("Job") or {}
    group_name = alloc.get("TaskGroup")
    for group in job.get("TaskGroups") or []:
        if group_name is not None and group.get("Name") != group_name:
            continue
        for task in group.get("Tasks") or []:
            devices = ((task or {}).get("Resources") or {}).get("Devices") or []
            if any(_asks_for_gpus(device) for device in devices):
                return True
    return False


def _asks_for_gpus(device: Any) -> bool:
    if not isinstance(device, dict) or not is_gpu_device_name(str(device.get("Name", ""))):
        return False
    count = device.get("Count")
    return count is None or _positive(count)  # Nomad's count defaults to one


def _positive(value: object) -> bool:
    """A count above zero; anything unreadable counts as one (safe side)."""
    try:
        return int(str(value)) > 0
    except ValueError:
        return True


def _allocation_name(alloc: JsonObject) -> str:
    return f"{alloc.get('Namespace') or 'default'}/{alloc.get('Name') or alloc.get('ID', '')}"
