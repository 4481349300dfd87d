"""Recovery on a simulated node: the agent's ``recovery`` settings from the scenario's knobs, and the
simulated reset / reboot / validation (``sim.simulated_recovery``) that stands in for the node's commands.
"""

from __future__ import annotations

from agent.backends.nvml.seam import NvmlLibrary
from agent.recovery.actions import NodeActions
from agent.recovery.settings import RebootSettings, RecoverySettings, ValidationSettings
from agent.settings import AgentSettings
from sim.fakes.nvml import FakeNvml
from sim.scenario.model import AgentKnobs
from sim.simulated_recovery import SimulatedNodeRecovery

# A simulated node takes this long to reboot: long enough that the live view shows it "rebooting".
SIMULATED_REBOOT_S = 1.0


def recovery_settings(knobs: AgentKnobs) -> RecoverySettings:
    """The ``recovery`` section: off unless the scenario turns it on, with the scenario's short timings."""
    if not knobs.recovery:
        return RecoverySettings()
    return RecoverySettings(
        enabled=True,
        retry_backoff_s=knobs.recovery_backoff_s,
        retry_backoff_max_s=knobs.recovery_backoff_s * 4,
        # The simulated reboot never runs a command; the deadline only bounds a node that does not come back.
        reboot=RebootSettings(mode="kured", deadline_s=knobs.reboot_deadline_s),
        validation=ValidationSettings(clean_readings=knobs.validation_clean_readings),
    )


def simulated_recovery(settings: AgentSettings, library: NvmlLibrary) -> NodeActions | None:
    """The node's simulated recovery when its agent recovers and its GPUs are fake; None otherwise."""
    if not settings.recovery.enabled or not isinstance(library, FakeNvml):
        return None
    return SimulatedNodeRecovery(library, node=settings.node_name, reboot_delay_s=SIMULATED_REBOOT_S)
