"""NVML's GPU recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, field 230): what to do, per driver.

Values (nvmlDeviceGpuRecoveryAction_t and NVIDIA's "Error Recovery and Response Flags"): 0 none, 1 GPU reset,
2 node reboot, 3 drain P2P, 4 drain P2P and reset. Drain P2P means "stop every process that does
peer-to-peer traffic, then read the field again": the GPU must be drained of work first, so we recommend
``drain_and_reset`` for it as for 4 (the re-read after the drain gives the final action). Newer drivers add
5 (recover IMEX domain), 6 (PCIe bus reset) and 7 (system reboot); values we do not map are reported as a
warning naming the value until ``recovery_action.overrides`` classifies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.base import gpu_label
from checks.config import ChecksConfig
from checks.xid_catalogue import status_for_action
from core.findings import Action, Finding, Status
from core.snapshot import NodeSnapshot

CHECK = "recovery_action"


@dataclass(frozen=True, slots=True)
class RecoveryAction:
    """One value of the field: NVIDIA's name for it and the action we recommend."""

    value: int
    name: str
    action: Action


RECOVERY_ACTIONS: dict[int, RecoveryAction] = {
    item.value: item
    for item in (
        RecoveryAction(0, "None", Action.NONE),
        RecoveryAction(1, "GPU Reset Required", Action.RESET_GPU),
        RecoveryAction(2, "Node Reboot Required", Action.REBOOT),
        RecoveryAction(3, "Drain P2P", Action.DRAIN_AND_RESET),
        RecoveryAction(4, "Drain and Reset", Action.DRAIN_AND_RESET),
    )
}

NEWER_VALUE_NAMES: dict[int, str] = {5: "Recover IMEX Domain", 6: "PCIe Bus Reset", 7: "System Reboot"}
"""Values later drivers define that we leave to configuration (named in the warning)."""


def value_name(value: int) -> str:
    """NVIDIA's name for a field value, or ``unknown``."""
    known = RECOVERY_ACTIONS.get(value)
    if known is not None:
        return known.name
    return NEWER_VALUE_NAMES.get(value, "unknown")


def action_for_value(value: int, config: ChecksConfig) -> Action | None:
    """Our action for a field value (configuration first), or None when the value is not classified."""
    if value in config.recovery_action.overrides:
        return config.recovery_action.overrides[value]
    known = RECOVERY_ACTIONS.get(value)
    return known.action if known is not None else None


def check_recovery_action(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``RECOVERY_ACTION``: 1-4 (or a configured value) fail or warn by their action; unknown values warn."""
    if not config.recovery_action.enabled:
        return []
    findings: list[Finding] = []
    for gpu in snapshot.gpus:
        value = gpu.recovery_action
        if value is None:
            continue
        action = action_for_value(value, config)
        where = f"{gpu_label(gpu)}: NVML recovery action {value} ({value_name(value)})"
        if action is None:
            findings.append(
                Finding(
                    check=CHECK,
                    gpu=gpu.uuid,
                    status=Status.WARN,
                    code="RECOVERY_ACTION",
                    message=f"{where} is not classified; map it in recovery_action.overrides",
                    action=Action.NONE,
                )
            )
        elif action is not Action.NONE:
            findings.append(
                Finding(
                    check=CHECK,
                    gpu=gpu.uuid,
                    status=status_for_action(action),
                    code="RECOVERY_ACTION",
                    message=f"{where}: {action.value}",
                    action=action,
                )
            )
    return findings
