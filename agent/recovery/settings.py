"""The ``recovery`` section of the agent's settings (docs/agent.md is generated from these descriptions)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from core.settings import SettingsSection
from remediation.plan.recovery import RecoveryRules

DEFAULT_RESET_COMMAND = ["nvidia-smi", "--gpu-reset", "-i", "{index}"]
DEFAULT_SENTINEL = Path("/var/run/reboot-required")
DEFAULT_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class RebootSettings(SettingsSection):
    """How a reboot is asked for."""

    mode: Literal["kured", "command", "off"] = Field(
        default="kured",
        description="kured: write its sentinel file; command: run `command`; off: never (a human reboots).",
    )
    sentinel_path: Path = Field(
        default=DEFAULT_SENTINEL, description="kured's sentinel file (a hostPath in the chart)."
    )
    command: list[str] = Field(
        default_factory=list, description="The reboot command when mode=command, run without a shell."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds the reboot command may take.")
    deadline_s: float = Field(
        default=1800.0,
        gt=0,
        description="Seconds the node has to come back (another boot id) after the request; past them the "
        "request is withdrawn and the attempt failed (kured absent or locked, a command ignored).",
    )

    @model_validator(mode="after")
    def _command_when_mode_is_command(self) -> RebootSettings:
        if self.mode == "command" and not self.command:
            raise ValueError("reboot.command is required when reboot.mode is command")
        return self


class ValidationSettings(SettingsSection):
    """How a reset or rebooted node is validated before it is released."""

    dcgmi_level: int = Field(
        default=2, ge=1, le=4, description="`dcgmi diag -r` level, when dcgmi is available."
    )
    clean_readings: int = Field(
        default=3, ge=1, description="Consecutive clean readings in state testing that release the node."
    )
    timeout_s: float = Field(
        default=600.0, gt=0, description="Seconds the dcgmi diagnostic may take (it runs in the background)."
    )
    max_starts: int = Field(
        default=3,
        ge=1,
        description="Validation diagnostics started per incident (agent restarts mid-run start another) "
        "before the incident escalates to replace.",
    )


class RecoverySettings(SettingsSection):
    """GPU reset / reboot request after the drain, then validation (needs policy.drain and an aggregator)."""

    enabled: bool = Field(
        default=False, description="Reset or reboot drained nodes, validate them and release them."
    )
    reset_command: list[str] = Field(
        default_factory=lambda: list(DEFAULT_RESET_COMMAND),
        min_length=1,
        description="GPU reset command, run without a shell once per GPU; {index} and {uuid} are replaced.",
    )
    reset_timeout_s: float = Field(default=120.0, gt=0, description="Seconds one GPU reset may take.")
    reboot: RebootSettings = Field(default_factory=RebootSettings, description="The reboot request.")
    boot_id_path: Path = Field(
        default=DEFAULT_BOOT_ID, description="Where the boot id is read (it changes when the node reboots)."
    )
    validation: ValidationSettings = Field(
        default_factory=ValidationSettings, description="Validation before release."
    )
    max_attempts: int = Field(
        default=2, ge=1, description="Reset or reboot attempts per incident before it escalates to replace."
    )
    retry_backoff_s: float = Field(
        default=60.0, gt=0, description="Seconds before the attempt after a failed one; doubled each failure."
    )
    retry_backoff_max_s: float = Field(
        default=900.0, gt=0, description="The longest wait between two attempts (caps the doubling)."
    )

    def rules(self) -> RecoveryRules | None:
        """What the planner needs; None while recovery is off."""
        if not self.enabled:
            return None
        return RecoveryRules(
            max_attempts=self.max_attempts,
            reboot=self.reboot.mode != "off",
            clean_readings=self.validation.clean_readings,
            retry_backoff_s=self.retry_backoff_s,
            retry_backoff_max_s=max(self.retry_backoff_max_s, self.retry_backoff_s),
            reboot_deadline_s=self.reboot.deadline_s,
            max_validation_starts=self.validation.max_starts,
        )
