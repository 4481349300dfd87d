"""A simulated node's recovery actions, for the demo and tests: no command, no file, no subprocess.

:class:`SimulatedNodeRecovery` resets the GPUs of the node's fake NVML (``FakeNvml.reset_gpu``: a pending
remap applied, volatile ECC cleared ...; a lost or busy GPU refuses) and simulates a reboot: after
``reboot_delay_s`` on the given clock the fake NVML reboots (lost GPUs back, faults a reboot clears cleared,
processes gone) and the boot id changes, so the agent's planner sees the node came back and validates it.
``reboot_delay_s=None`` is a node that never reboots (kured absent): the reboot deadline then fails the
attempt. Validation is by clean readings only, unless ``fail_validation`` is set (a diagnostic that fails).

Plug it in through ``agent.wiring.build_agent(settings, library=nvml, recovery_actions=SimulatedNodeRecovery(
nvml, node=name, clock=clock))`` with ``recovery.enabled`` in the settings; the real command path stays the
default when ``recovery_actions`` is not given.
"""

from __future__ import annotations

import threading
from typing import Protocol

from agent.backends.nvml import seam as nvml
from agent.recovery.commands import CommandOutcome
from agent.recovery.reset import GpuTarget
from agent.recovery.validation import ValidationOutcome
from core.clock import Clock, RealClock, TimerHandle


class ResettableGpus(Protocol):
    """What the simulation needs of a fake NVML (``sim.fakes.nvml.FakeNvml`` has it)."""

    def reset_gpu(self, gpu: int | str) -> None: ...

    def reboot(self) -> None: ...


class SimulatedValidation:
    """No diagnostic tool on a simulated node: passes at once (the clean readings then decide), or fails
    at once while ``fail`` is set."""

    def __init__(self) -> None:
        self.fail = False

    def immediate(self) -> ValidationOutcome:
        if self.fail:
            return ValidationOutcome(False, "simulated diagnostic failed: memory test")
        return ValidationOutcome(True, "simulated node: validating by clean readings")

    def validate(self) -> ValidationOutcome:
        return self.immediate()


class SimulatedNodeRecovery:
    """:class:`~agent.recovery.actions.NodeActions` of a simulated node backed by a fake NVML."""

    def __init__(
        self,
        gpus: ResettableGpus,
        *,
        node: str,
        clock: Clock | None = None,
        reboot_delay_s: float | None = 0.0,
    ) -> None:
        self._gpus = gpus
        self._node = node
        self._clock: Clock = clock or RealClock()
        self.reboot_delay_s = reboot_delay_s
        self._validation = SimulatedValidation()
        self._lock = threading.Lock()
        self._boot = 1
        self._timer: TimerHandle | None = None
        self.resets: list[int] = []  # GPU indexes reset, in order (what the demo and tests show)
        self.reboot_requests = 0

    @property
    def validator(self) -> SimulatedValidation:
        return self._validation

    @property
    def fail_validation(self) -> bool:
        """Whether the simulated diagnostic fails (a GPU a reset did not fix)."""
        return self._validation.fail

    @fail_validation.setter
    def fail_validation(self, fail: bool) -> None:
        self._validation.fail = fail

    def reset_gpu(self, target: GpuTarget) -> CommandOutcome:
        try:
            self._gpus.reset_gpu(target.index)
        except nvml.NVMLError as exc:
            name = nvml.error_name(nvml.error_code(exc))
            return CommandOutcome(ok=False, detail=f"simulated reset of GPU {target.index} refused: {name}")
        with self._lock:
            self.resets.append(target.index)
        return CommandOutcome(ok=True, detail=f"simulated reset of GPU {target.index}", exit_code=0)

    def request_reboot(self, incident_id: str) -> CommandOutcome:
        self.withdraw_reboot()  # a new request replaces one still pending
        with self._lock:
            self.reboot_requests += 1
            delay = self.reboot_delay_s
        if delay is None:
            return CommandOutcome(ok=True, detail="reboot requested (simulated: this node never reboots)")
        if delay <= 0:
            self.reboot_now()
            return CommandOutcome(ok=True, detail="simulated reboot done")
        timer = self._clock.call_later(delay, self.reboot_now)
        with self._lock:
            self._timer = timer
        return CommandOutcome(ok=True, detail=f"simulated reboot in {delay:g} s")

    def withdraw_reboot(self) -> str:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is None:
            return ""
        timer.cancel()
        return "simulated reboot cancelled"

    def reboot_now(self) -> None:
        """The node reboots: the fake NVML's GPUs come back reset, and the boot id changes."""
        self._gpus.reboot()
        with self._lock:
            self._boot += 1
            self._timer = None

    def boot_id(self) -> str | None:
        with self._lock:
            return f"{self._node}-boot-{self._boot}"
