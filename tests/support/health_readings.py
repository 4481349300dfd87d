"""Verdicts as the real checks produce them, and a state machine on a manual clock, for the health tests.

Every verdict comes from ``checks.runner.run_checks`` over a validated snapshot, so the check names, codes,
statuses and actions in these tests are exactly the ones the agent sees in production.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from agent.state.machine import AgentState, DebounceConfig, HealthStateMachine
from checks.runner import run_checks
from core.clock import ManualClock
from core.findings import Verdict
from core.snapshot import GpuSnapshot, NodeSnapshot

NODE = "gpu-node-07"
START = datetime(2026, 12, 2, 7, 40, tzinfo=UTC)
INTERVAL_S = 10.0


def gpu_fields(index: int = 0, **changes: Any) -> dict[str, Any]:
    """A healthy GPU's readings, with ``changes`` applied (before validation)."""
    fields: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
        "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "lost": False,
        "persistence_mode": True,
        "temperature_c": 40,
        "ecc": {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "replay_counter": 0},
        "recovery_action": 0,
    }
    fields.update(changes)
    return fields


def reading(*gpus: dict[str, Any], nvml_error: str | None = None) -> Verdict:
    """The verdict of the real checks over a one-node snapshot (one healthy GPU by default)."""
    listed = [] if nvml_error else [GpuSnapshot.model_validate(g) for g in gpus or (gpu_fields(),)]
    return run_checks(NodeSnapshot(node=NODE, gpus=listed, nvml_error=nvml_error))


def xid(code: int) -> Verdict:
    return reading(gpu_fields(xid_events=[{"xid": code, "source": "nvml"}]))


HEALTHY = reading()
XID_79 = xid(79)  # fallen off the bus: xid check, fail, reboot
XID_48 = xid(48)  # double-bit ECC: xid check, fail, reset_gpu
XID_13 = xid(13)  # application fault: xid check, warn, restart_app
ROW_REMAP_PENDING = reading(gpu_fields(remapped_rows={"pending": True}))  # row_remap, fail, reset_gpu
ROW_REMAP_FAILURE = reading(gpu_fields(remapped_rows={"failure": True}))  # row_remap, fail, replace
GPU_LOST = reading(gpu_fields(lost=True))  # presence, fail, reboot
NVLINK_DOWN = reading(gpu_fields(nvlink=[{"link": 0, "active": False}]))  # nvlink (polled), fail, reset_gpu
PCIE_DEGRADED = reading(gpu_fields(pcie={"gen": 5, "width": 8, "max_gen": 5, "max_width": 16}))  # warn, none
NVML_DOWN = reading(nvml_error="driver not loaded")  # presence, unknown


class Ids:
    """Deterministic incident ids: inc-1, inc-2, ... (records which node and time each was made for)."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self.made: list[tuple[str, datetime]] = []

    def __call__(self, node: str, started_at: datetime) -> str:
        self.made.append((node, started_at))
        return f"inc-{next(self._numbers)}"


class Rig:
    """A state machine of one node, its manual clock, and a way to feed it readings one interval apart."""

    def __init__(self, config: DebounceConfig | None = None, *, initial: AgentState | None = None) -> None:
        self.config = config or DebounceConfig()
        self.clock = ManualClock(START)
        self.ids = Ids()
        self.machine = self.build(initial)

    def build(self, initial: AgentState | None = None) -> HealthStateMachine:
        """A machine on this rig's clock and ids (a restart passes the saved state as ``initial``)."""
        return HealthStateMachine(
            NODE, self.config, clock=self.clock.now, initial=initial, new_incident_id=self.ids
        )

    def feed(self, *verdicts: Verdict, every_s: float = INTERVAL_S) -> list[str]:
        """Observe each verdict after ``every_s`` seconds; the state after each, for sequence assertions."""
        states = []
        for verdict in verdicts:
            self.clock.advance(every_s)
            states.append(self.machine.observe(verdict).state.value)
        return states


def repeat(verdict: Verdict, times: int) -> list[Verdict]:
    return [verdict] * times
