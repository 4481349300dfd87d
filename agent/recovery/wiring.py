"""Build the recovery parts from the settings (called by ``agent/wiring.py``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from agent.backends.nvml.seam import NvmlLibrary
from agent.recovery.actions import HostActions, NodeActions
from agent.recovery.executor import LocalRecovery, LocalRecoveryParts, RecoveringExecutor
from agent.recovery.reset import GpuResetter
from remediation.executor.contract import NodeExecutor
from remediation.plan.recovery import RecoveryRules

if TYPE_CHECKING:
    from agent.settings import AgentSettings


def with_recovery(
    executor: NodeExecutor,
    settings: AgentSettings,
    library: NvmlLibrary,
    *,
    actions: NodeActions | None = None,
    wake: threading.Event | None = None,
) -> NodeExecutor:
    """``executor`` itself while recovery is off; else wrapped so the recovery steps run on this node.

    ``actions`` is how the node resets a GPU, reboots and validates: by default the real commands and files
    of the settings (:class:`~agent.recovery.actions.HostActions`, which also takes a command runner);
    a simulated node passes ``sim.simulated_recovery.SimulatedNodeRecovery``. ``wake`` is set when a
    background validation ends, so the loop collects its outcome at once.
    """
    recovery = settings.recovery
    rules = recovery.rules()
    if rules is None:
        return executor
    return RecoveringExecutor(executor, local_recovery(settings, library, rules, actions=actions, wake=wake))


def local_recovery(
    settings: AgentSettings,
    library: NvmlLibrary,
    rules: RecoveryRules,
    *,
    actions: NodeActions | None = None,
    wake: threading.Event | None = None,
) -> LocalRecovery:
    """The node-local half: NVML-checked resets, reboot requests and validation through ``actions``."""
    chosen = actions or HostActions(
        settings.recovery, dcgmi_path=settings.dcgm.dcgmi.path, dcgmi_host=settings.dcgm.dcgmi.host
    )
    parts = LocalRecoveryParts(resetter=GpuResetter(library, chosen.reset_gpu), actions=chosen, rules=rules)
    return LocalRecovery(settings.node_name, parts, wake)
