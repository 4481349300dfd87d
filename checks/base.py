"""What every check shares: the check signature and small helpers for messages and statuses."""

from __future__ import annotations

from collections.abc import Callable

from checks.config import ChecksConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

CheckFunction = Callable[[NodeSnapshot, ChecksConfig], list[Finding]]
"""A check: a pure function from one snapshot and the settings to its findings (no I/O)."""


def gpu_label(gpu: GpuSnapshot) -> str:
    """How messages name a GPU: its index and, when known, its PCI address."""
    if gpu.pci_bus_id:
        return f"GPU {gpu.index} ({gpu.pci_bus_id})"
    return f"GPU {gpu.index}"


def warn_or_fail(action: Action) -> Status:
    """Status of a degradation finding: warn, or fail when its action takes the GPU out of service.

    A configured action of ``reset_gpu`` or worse means the node must stop taking work, and a ``warn``
    carrying it would contradict that; so the status follows the action upwards, never below warn.
    """
    return Status.FAIL if action.takes_node_out_of_service else Status.WARN


def gpu_finding(
    check: str, gpu: GpuSnapshot, *, status: Status, code: str, detail: str, action: Action
) -> Finding:
    """A finding about one GPU; the message starts with the GPU's label."""
    return Finding(
        check=check,
        gpu=gpu.uuid,
        status=status,
        code=code,
        message=f"{gpu_label(gpu)}: {detail}",
        action=action,
    )
