"""What the runbook scenarios of both orchestrators share; the rig itself is ``tests/support/scenario_rig.py``."""

from __future__ import annotations

import pytest

from core.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """The manual clock shared by the emulator, the agent and the executor's retry sleeps."""
    return ManualClock()
