"""The incident is on disk before anything is done under its id (the write-ahead rule of agent/loop.py).

An agent killed between the taint (or the permit the aggregator granted for the incident) and the end of its
pass must come back to the same incident: a restarted agent that opens a new one holds a permit for an
incident it no longer knows, gives it back, and is then refused by the node's cooldown for the new one,
so the faulty node stays tainted and undrained for the whole cooldown (found by tests/faults/test_kill.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.state.store import StateStore
from core.steps import ApplyReport, SetTaint, Step
from tests.unit.agent.test_loop import FakeNode, Rig


class DiskAtTaint(FakeNode):
    """Reads the state file at the moment the taint is applied, as a crash there would leave it."""

    def __init__(self, state_file: Path) -> None:
        super().__init__()
        self.state_file = state_file
        self.incident_on_disk: list[str | None] = []

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        if any(isinstance(step, SetTaint) for step in steps):
            saved = StateStore(self.state_file).load()
            incident = saved.health.incident if saved is not None else None
            self.incident_on_disk.append(incident.id if incident is not None else None)
        return super().apply(steps, dry_run=dry_run)


def test_the_new_incident_is_saved_before_the_taint_that_acts_under_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    executor = DiskAtTaint(rig.store_path)
    rig.executor = executor
    rig.agent.close()
    rig.agent = rig.new_agent()
    try:
        rig.agent.tick()
        rig.inject_xid(79)
        result = rig.agent.tick()
    finally:
        rig.agent.close()
    assert result.health.incident is not None
    assert executor.incident_on_disk == [result.health.incident.id]
    restarted = StateStore(rig.store_path).load()
    assert restarted is not None and restarted.health.incident == result.health.incident


def test_a_dry_run_still_writes_nothing(tmp_path: Path) -> None:
    rig = Rig(tmp_path, dry_run=True)
    try:
        rig.agent.tick()
        rig.inject_xid(79)
        rig.agent.tick()
    finally:
        rig.agent.close()
    assert not rig.store_path.exists()
