"""Can we see the GPUs at all: NVML initialised, every expected GPU listed, none lost, each one answering.

``unknown`` is reserved for a source that should answer and cannot (NVML not initialised, a GPU that
answers nothing); it is never a fault by itself. A lost GPU or a missing one is a fault: NVIDIA's answer to
a GPU that fell off the bus (XID 79) is RESTART_BM, hence ``reboot``.
"""

from __future__ import annotations

from pydantic import BaseModel

from checks.base import gpu_finding, warn_or_fail
from checks.config import ChecksConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

CHECK = "presence"

TELEMETRY_FIELDS: tuple[str, ...] = (
    "persistence_mode",
    "temperature_c",
    "memory_temperature_c",
    "power_w",
    "power_limit_w",
    "clocks_event_reasons",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "pcie",
    "nvlink",
    "recovery_action",
)
"""The readings a GPU answers; identity (index, uuid, name, PCI address) and events are not readings."""

_MAX_ERROR_TEXT = 200


def check_presence(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``NVML_UNAVAILABLE``, ``GPU_MISSING`` (node level), ``GPU_LOST`` and ``GPU_UNREADABLE`` (per GPU)."""
    settings = config.presence
    if not settings.enabled:
        return []
    if snapshot.nvml_error is not None:
        # gpus is empty by contract; GPU_MISSING would turn "cannot see" into "broken", so it is not raised.
        return [_nvml_unavailable(snapshot.nvml_error)]
    findings: list[Finding] = []
    expected = snapshot.expected_gpu_count
    if expected is not None and len(snapshot.gpus) < expected:
        findings.append(
            Finding(
                check=CHECK,
                gpu=None,
                status=warn_or_fail(settings.missing_action),
                code="GPU_MISSING",
                message=f"{len(snapshot.gpus)} of {expected} expected GPUs visible to NVML",
                action=settings.missing_action,
            )
        )
    for gpu in snapshot.gpus:
        if gpu.lost is True:
            findings.append(
                gpu_finding(
                    CHECK,
                    gpu,
                    status=warn_or_fail(settings.lost_action),
                    code="GPU_LOST",
                    detail="NVML reports the GPU lost (fallen off the bus)",
                    action=settings.lost_action,
                )
            )
        elif answered_nothing(gpu):
            findings.append(
                gpu_finding(
                    CHECK,
                    gpu,
                    status=Status.UNKNOWN,
                    code="GPU_UNREADABLE",
                    detail="the GPU answered none of the health readings",
                    action=Action.NONE,
                )
            )
    return findings


def answered_nothing(gpu: GpuSnapshot) -> bool:
    """True when every health reading of the GPU is null (or an empty group / list)."""
    return all(_is_empty(getattr(gpu, name)) for name in TELEMETRY_FIELDS)


def _is_empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, list):
        return len(value) == 0
    if isinstance(value, BaseModel):
        return all(item is None for item in value.model_dump().values())
    return False


def _nvml_unavailable(error: str) -> Finding:
    text = " ".join(error.split())[:_MAX_ERROR_TEXT]
    return Finding(
        check=CHECK,
        gpu=None,
        status=Status.UNKNOWN,
        code="NVML_UNAVAILABLE",
        message=f"NVML unavailable: {text}",
        action=Action.NONE,
    )
