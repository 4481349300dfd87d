"""Stopping the agent ends a ``dcgmi diag`` still running — the deep diagnostic's and the validation's —
with every process it started (its process group), and no new run starts after that. A fake ``dcgmi`` that
hangs and spawns a child of its own stands in for ``dcgmi`` and ``nvvs``."""

from __future__ import annotations

import stat
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from executor_defaults import PerfectNode
from waiting import HANG_GUARD_S, wait_until

from agent.backends.dcgm.dcgmi import DcgmiError, DcgmiProcesses, DcgmiStopped, run_diag
from agent.diagnostics.order import DiagOrder
from agent.recovery.actions import HostActions
from agent.recovery.executor import LocalRecovery, LocalRecoveryParts, RecoveringExecutor
from agent.recovery.reset import GpuResetter
from agent.recovery.settings import RecoverySettings
from agent.recovery.validation import DcgmiValidator
from agent.settings import AgentSettings, HttpSettings
from agent.wiring import build_agent
from core.clock import ManualClock
from core.steps import Validate
from remediation.plan.recovery import RecoveryRules
from sim.fakes.nvml import FakeNvml

NODE = "gpu-node-0"

HANGING_DCGMI = """#!{python}
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open({pids!r}, "w") as out:
    out.write(f"{{__import__('os').getpid()}} {{child.pid}}\\n")
time.sleep(120)
"""


def install_hanging_dcgmi(tmp_path: Path) -> tuple[str, Path]:
    """The fake binary and the file where it writes its pid and its child's once both run."""
    pids = tmp_path / "dcgmi.pids"
    script = tmp_path / "dcgmi"
    script.write_text(HANGING_DCGMI.format(python=sys.executable, pids=str(pids)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), pids


def started_pids(pids: Path) -> list[int]:
    wait_until(lambda: pids.exists() and pids.read_text().endswith("\n"), message="the fake dcgmi to start")
    return [int(pid) for pid in pids.read_text().split()]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone: it holds nothing and runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids: Sequence[int]) -> list[int]:
    """The pids still running after the hang guard (empty: all gone)."""
    wait_until(lambda: not any(alive(pid) for pid in pids))
    return [pid for pid in pids if alive(pid)]


def test_agent_stop_ends_a_running_deep_diagnostic_and_its_children(tmp_path: Path) -> None:
    """A forced on-demand run starts (node tainted ``testing``); Agent.stop kills dcgmi and the process it
    spawned; the run stays recorded so the next start reports it interrupted."""
    path, pids = install_hanging_dcgmi(tmp_path)
    settings = AgentSettings(
        node_name=NODE,
        state_dir=tmp_path / "state",
        http=HttpSettings(enabled=False),
        diagnostics={"on_demand": True, "timeout_s": 300.0},
        dcgm={"dcgmi": {"path": path}},
    )
    clock = ManualClock(start=datetime(2026, 12, 2, tzinfo=UTC))
    nvml = FakeNvml("h100_sxm", 2, seed=7, node_name=NODE)
    agent = build_agent(settings, library=nvml, clock=clock, executor=PerfectNode())
    diagnostics = agent.parts.diagnostics
    assert diagnostics is not None
    agent.tick()  # a first healthy pass
    diagnostics.request(DiagOrder(level=1, requested_by="alice", force=True))
    agent.tick()
    assert diagnostics.running
    running = started_pids(pids)

    agent.stop(timeout=HANG_GUARD_S)

    assert wait_gone(running) == []
    assert diagnostics.wait(HANG_GUARD_S), "the diagnostic's thread outlived the agent"
    again = build_agent(settings, library=nvml, clock=clock, executor=PerfectNode())
    assert again.parts.diagnostics is not None
    notes = [note.message for note in again.parts.diagnostics.news()]
    assert any("interrupted by an agent restart" in note for note in notes)
    again.close()


def test_recovering_executor_close_ends_a_running_validation_diagnostic(tmp_path: Path) -> None:
    """The validation's ``dcgmi diag -r 2`` runs in the background; closing the executor (agent shutdown)
    kills it and its child."""
    path, pids = install_hanging_dcgmi(tmp_path)
    validator = DcgmiValidator(path=path, level=2, timeout_s=300.0, clean_readings=3)
    actions = HostActions(RecoverySettings(boot_id_path=tmp_path / "boot_id"), validator=validator)
    nvml = FakeNvml("h100_sxm", 1, seed=1)
    parts = LocalRecoveryParts(
        resetter=GpuResetter(nvml, actions.reset_gpu), actions=actions, rules=RecoveryRules()
    )
    executor = RecoveringExecutor(PerfectNode(), LocalRecovery(NODE, parts))
    (result,) = executor.apply([Validate("inc-1", after="reset")]).results
    assert result.pending and result.ok
    running = started_pids(pids)

    executor.close()

    assert wait_gone(running) == []
    assert executor.local.validation.running is None


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    path, pids = install_hanging_dcgmi(tmp_path)
    with pytest.raises(DcgmiError, match=r"no answer within 1 s"):
        run_diag(1, timeout_s=1.0, path=path)
    assert wait_gone(started_pids(pids)) == []


def test_nothing_starts_once_stopped(tmp_path: Path) -> None:
    path, pids = install_hanging_dcgmi(tmp_path)
    processes = DcgmiProcesses()
    processes.stop()

    with pytest.raises(DcgmiStopped):
        run_diag(1, timeout_s=HANG_GUARD_S, path=path, processes=processes)
    assert not pids.exists() and processes.running == 0
