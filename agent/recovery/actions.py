"""What a node does when recovery acts on it: reset one GPU, ask for a reboot, withdraw the request, tell
its boot id, validate its GPUs. :class:`NodeActions` is the seam; :class:`HostActions` is the real node
(commands run without a shell, kured's sentinel file, the kernel's boot id, ``dcgmi diag``), and
``sim.simulated_recovery.SimulatedNodeRecovery`` a simulated one for the demo and tests.

The NVML check that no process uses a GPU before its reset stays in ``agent.recovery.reset.GpuResetter``
for both: it is a safety rule, not a way of acting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from agent.recovery.commands import CommandOutcome, fill, run_command
from agent.recovery.reboot import clear_sentinel, read_boot_id, request_reboot
from agent.recovery.reset import GpuTarget
from agent.recovery.settings import RecoverySettings
from agent.recovery.validation import DcgmiValidator, Validator

CommandRunner = Callable[[Sequence[str], float], CommandOutcome]
"""Runs one command line with a timeout (``agent.recovery.commands.run_command`` by default)."""


class NodeActions(Protocol):
    """The node-local actions of the recovery loop; none raises, each answers in one line."""

    @property
    def validator(self) -> Validator:
        """Checks the GPUs after a reset or a reboot."""
        ...

    def reset_gpu(self, target: GpuTarget) -> CommandOutcome:
        """Reset one GPU that NVML said is free."""
        ...

    def request_reboot(self, incident_id: str) -> CommandOutcome:
        """Ask for a reboot of the node; ok means asked, not done (another boot id says done)."""
        ...

    def withdraw_reboot(self) -> str:
        """Take back a request that was not acted on in time; what was done, in a few words ('' nothing)."""
        ...

    def boot_id(self) -> str | None:
        """This boot's id (changes on every boot); None when it cannot be read."""
        ...


class HostActions:
    """The real node: the configured reset command, kured's sentinel or a reboot command, ``dcgmi diag``.

    ``runner`` runs the reset and reboot commands (a test or a wrapper may pass its own); ``validator``
    replaces the ``dcgmi diag`` validator built from the settings.
    """

    def __init__(
        self,
        settings: RecoverySettings,
        *,
        dcgmi_path: str = "dcgmi",
        dcgmi_host: str | None = None,
        runner: CommandRunner = run_command,
        validator: Validator | None = None,
    ) -> None:
        self._settings = settings
        self._runner = runner
        self._validator = validator or DcgmiValidator(
            path=dcgmi_path,
            host=dcgmi_host,
            level=settings.validation.dcgmi_level,
            timeout_s=settings.validation.timeout_s,
            clean_readings=settings.validation.clean_readings,
        )

    @property
    def validator(self) -> Validator:
        return self._validator

    def reset_gpu(self, target: GpuTarget) -> CommandOutcome:
        argv = fill(self._settings.reset_command, {"index": str(target.index), "uuid": target.uuid})
        return self._runner(argv, self._settings.reset_timeout_s)

    def request_reboot(self, incident_id: str) -> CommandOutcome:
        reboot = self._settings.reboot
        if reboot.mode == "command":  # through the injectable runner, like the reset
            return self._runner(reboot.command, reboot.timeout_s)
        return request_reboot(reboot, incident_id)

    def withdraw_reboot(self) -> str:
        reboot = self._settings.reboot
        if reboot.mode != "kured" or not reboot.sentinel_path.exists():
            return ""
        clear_sentinel(reboot.sentinel_path)  # so kured does not reboot later, unasked
        return f"{reboot.sentinel_path} removed"

    def boot_id(self) -> str | None:
        return read_boot_id(self._settings.boot_id_path)
