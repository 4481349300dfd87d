"""The node-local recovery parts: the GPU reset (NVML process check, then a real command per GPU), the
reboot request and the boot id, the dcgmi validator, and the composite executor that routes the steps."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from executor_defaults import ExecutorDefaults
from repo_paths import FIXTURES as TEST_FIXTURES
from waiting import HANG_GUARD_S

from agent.backends.dcgm.dcgmi import DcgmiError, DiagRun
from agent.backends.dcgm.dcgmi_output import parse_diag
from agent.backends.nvml import seam as nvml_seam
from agent.recovery.actions import HostActions
from agent.recovery.executor import LocalRecovery, LocalRecoveryParts, RecoveringExecutor
from agent.recovery.reboot import read_boot_id, request_reboot
from agent.recovery.reset import GpuResetter
from agent.recovery.settings import RebootSettings, RecoverySettings
from agent.recovery.validation import DcgmiValidator, ReadingsOnly
from core.steps import (
    ApplyReport,
    NodeFacts,
    Reboot,
    Reset,
    SetStateLabel,
    SetTaint,
    Step,
    StepResult,
    Validate,
)
from remediation.plan.recovery import RecoveryRules
from sim.fakes.nvml import FakeNvml

FIXTURES = TEST_FIXTURES / "dcgm"
FAKE_SMI = """\
import pathlib, sys
log = pathlib.Path(sys.argv[1])
if (log.parent / "fail").exists():
    sys.stderr.write("Unable to reset GPU: in use by another client")
    sys.exit(3)
with log.open("a") as out:
    out.write(" ".join(sys.argv[2:]) + "\\n")
"""


@pytest.fixture
def smi(tmp_path: Path) -> list[str]:
    """A stand-in for ``nvidia-smi --gpu-reset -i {index}`` that logs its arguments (fails on demand)."""
    script = tmp_path / "fake_smi.py"
    script.write_text(FAKE_SMI)
    return [sys.executable, str(script), str(tmp_path / "resets.log"), "--gpu-reset", "-i", "{index}"]


def command_resetter(nvml: FakeNvml, command: list[str]) -> GpuResetter:
    """The resetter of a real node: NVML's process check, then the configured command per GPU."""
    actions = HostActions(RecoverySettings(reset_command=command, reset_timeout_s=HANG_GUARD_S))
    return GpuResetter(nvml, actions.reset_gpu)


def resets(tmp_path: Path) -> list[str]:
    log = tmp_path / "resets.log"
    return log.read_text().splitlines() if log.exists() else []


def test_reset_runs_the_command_for_the_incident_gpus_by_index(smi: list[str], tmp_path: Path) -> None:
    nvml = FakeNvml("h100_sxm", 8, seed=3)
    resetter = command_resetter(nvml, smi)

    outcome = resetter.reset([nvml.gpu_uuids[2], nvml.gpu_uuids[5]])

    assert outcome.ok and outcome.detail == "GPU 2, 5 reset"
    assert resets(tmp_path) == ["--gpu-reset -i 2", "--gpu-reset -i 5"]
    assert not nvml.initialised  # its NVML session is closed again


def test_no_gpu_named_means_every_gpu(smi: list[str], tmp_path: Path) -> None:
    resetter = command_resetter(FakeNvml("h100_sxm", 2, seed=3), smi)

    assert resetter.reset([]).ok
    assert resets(tmp_path) == ["--gpu-reset -i 0", "--gpu-reset -i 1"]


def test_reset_is_refused_while_a_compute_process_uses_the_gpu(smi: list[str], tmp_path: Path) -> None:
    """A process still on the GPU (drain incomplete): refused with its pid, nothing run; once it exits, the
    reset goes ahead."""
    nvml = FakeNvml("h100_sxm", 8, seed=3)
    nvml.start_process(1, pid=4242)
    resetter = command_resetter(nvml, smi)

    refused = resetter.reset([nvml.gpu_uuids[1]])
    assert not refused.ok and refused.detail == "reset refused: GPU 1 is in use by process 4242"
    assert resets(tmp_path) == []

    nvml.end_process(1, 4242)
    assert resetter.reset([nvml.gpu_uuids[1]]).ok


def test_a_lost_gpu_is_refused_as_needing_a_reboot(smi: list[str], tmp_path: Path) -> None:
    nvml = FakeNvml("h100_sxm", 4, seed=3)
    nvml.lose_gpu(0)

    outcome = command_resetter(nvml, smi).reset([nvml.gpu_uuids[0]])

    assert not outcome.ok and "GPU 0 is lost (fell off the bus): only a reboot" in outcome.detail
    assert resets(tmp_path) == []


def test_a_gpu_nvml_no_longer_lists_is_refused(smi: list[str]) -> None:
    outcome = command_resetter(FakeNvml("h100_sxm", 2, seed=3), smi).reset(["GPU-gone"])

    assert not outcome.ok and outcome.detail == "reset refused: GPU-gone is not listed by NVML"


def test_without_nvml_nothing_is_reset(smi: list[str], tmp_path: Path) -> None:
    outcome = command_resetter(FakeNvml(driver_missing=True), smi).reset([])

    assert not outcome.ok and outcome.detail.startswith("reset refused: NVML unavailable")
    assert resets(tmp_path) == []


def test_a_failing_reset_command_names_the_gpu_and_the_error(smi: list[str], tmp_path: Path) -> None:
    (tmp_path / "fail").touch()
    nvml = FakeNvml("h100_sxm", 4, seed=3)

    outcome = command_resetter(nvml, smi).reset([nvml.gpu_uuids[3]])

    assert not outcome.ok
    assert outcome.detail.startswith("reset of GPU 3 failed: ")
    assert "exited with 3: Unable to reset GPU" in outcome.detail


def test_the_fake_gpu_reset_clears_a_pending_remap_but_not_a_lost_gpu_or_a_busy_one() -> None:
    """FakeNvml's model of a reset: pending remap applied, volatile DBE zeroed; IN_USE with a process."""
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    nvml.set_row_remap(0, pending=True, uncorrectable=1)
    nvml.set_ecc_dbe(0, volatile=2)
    nvml.reset_gpu(0)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 1, 0, 0)
    assert nvml.nvmlDeviceGetComputeRunningProcesses(handle) == []

    nvml.start_process(1, pid=7, used_mib=2)
    (process,) = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(1))
    assert (process.pid, process.usedGpuMemory) == (7, 2 * 1024 * 1024)
    with pytest.raises(nvml_seam.NVMLError) as refused:
        nvml.reset_gpu(1)
    assert nvml_seam.error_code(refused.value) == nvml_seam.NVML_ERROR_IN_USE
    nvml.reboot()  # a reboot ends every process
    nvml.reset_gpu(1)


# --- reboot and boot id -------------------------------------------------------------------------------------


def test_boot_id_is_read_and_missing_means_none(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text("6c1e0c1a-0d6c-4b8e-b2b5-2d1f0c9d8e7f\n")

    assert read_boot_id(path) == "6c1e0c1a-0d6c-4b8e-b2b5-2d1f0c9d8e7f"
    assert read_boot_id(tmp_path / "absent") is None


def test_kured_mode_writes_the_sentinel_file(tmp_path: Path) -> None:
    sentinel = tmp_path / "reboot-required"

    outcome = request_reboot(RebootSettings(mode="kured", sentinel_path=sentinel), "inc-1")

    assert outcome.ok and sentinel.read_text() == "gpuhealth inc-1\n"


def test_an_unwritable_sentinel_fails_the_attempt(tmp_path: Path) -> None:
    outcome = request_reboot(RebootSettings(sentinel_path=tmp_path / "no-dir" / "reboot-required"), "i")

    assert not outcome.ok and "cannot write" in outcome.detail


def test_command_mode_runs_the_configured_command(tmp_path: Path) -> None:
    marker = tmp_path / "rebooting"
    command = [sys.executable, "-c", f"import pathlib; pathlib.Path({str(marker)!r}).touch()"]

    assert request_reboot(RebootSettings(mode="command", command=command), "i").ok
    assert marker.exists()


def test_command_mode_without_a_command_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match=r"reboot\.command is required"):
        RecoverySettings.model_validate({"reboot": {"mode": "command"}})


def test_recovery_rules_follow_the_settings() -> None:
    assert RecoverySettings().rules() is None
    rules = RecoverySettings(enabled=True, max_attempts=3, reboot=RebootSettings(mode="off")).rules()
    assert rules is not None and (rules.max_attempts, rules.reboot) == (3, False)


# --- validation -------------------------------------------------------------------------------------------


def diag(name: str) -> DiagRun:
    return DiagRun(level=2, result=parse_diag((FIXTURES / name).read_text()), seconds=95.0)


def validator(runner: object) -> DcgmiValidator:
    return DcgmiValidator(
        path=sys.executable,
        level=2,
        timeout_s=HANG_GUARD_S,
        clean_readings=3,
        runner=runner,  # type: ignore[arg-type]
    )


def test_dcgmi_diag_that_passes_lets_the_readings_decide() -> None:
    outcome = validator(lambda level, timeout: diag("diag-3.1.0-r1-pass.json")).validate()

    assert outcome.passed and outcome.detail == "dcgmi diag -r 2 passed in 95 s"


def test_dcgmi_diag_that_fails_a_test_fails_validation() -> None:
    outcome = validator(lambda level, timeout: diag("diag-4.2.3-r2-memory-fail.json")).validate()

    assert not outcome.passed and outcome.detail.startswith("dcgmi diag -r 2 failed: ")


def test_dcgmi_that_cannot_run_is_not_a_gpu_fault() -> None:
    def broken(level: int, timeout: float) -> DiagRun:
        raise DcgmiError("dcgmi diag -r 2 -j: no answer within 10 s")

    outcome = validator(broken).validate()

    assert outcome.passed and "could not run" in outcome.detail


def test_without_dcgmi_validation_is_the_clean_readings() -> None:
    absent = DcgmiValidator(path="gpuhealth-no-dcgmi", level=2, timeout_s=1.0, clean_readings=4)

    assert absent.validate() == ReadingsOnly(4).validate()
    assert "4 clean readings" in absent.validate().detail


# --- the composite executor -------------------------------------------------------------------------------


@dataclass
class DrainState:
    incident_id: str
    phase: str


@dataclass
class OrchestratorExecutor(ExecutorDefaults):
    """A stateful stand-in for the orchestrator executor seam: records what it applied, has a drain."""

    drain_state: DrainState | None = None
    applied: list[list[Step]] = field(default_factory=list)
    closed: bool = False

    def facts(self) -> NodeFacts:
        return NodeFacts(drained_incident=self.drain_state.incident_id if self.drain_state else None)

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        self.applied.append(list(steps))
        return ApplyReport([StepResult(step, ok=True, detail="applied") for step in steps])

    def wait_for_change(self, timeout_s: float) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def composite(
    tmp_path: Path, smi: list[str], nvml: FakeNvml
) -> tuple[RecoveringExecutor, OrchestratorExecutor]:
    (tmp_path / "boot_id").write_text("boot-1\n")
    settings = RecoverySettings(
        reset_command=smi,
        reset_timeout_s=HANG_GUARD_S,
        reboot=RebootSettings(sentinel_path=tmp_path / "reboot-required"),
        boot_id_path=tmp_path / "boot_id",
    )
    actions = HostActions(settings, validator=ReadingsOnly(3))
    parts = LocalRecoveryParts(
        resetter=GpuResetter(nvml, actions.reset_gpu), actions=actions, rules=RecoveryRules()
    )
    wrapped = OrchestratorExecutor()
    return RecoveringExecutor(wrapped, LocalRecovery("gpu-node-0", parts)), wrapped


def test_recovery_steps_run_locally_and_the_rest_go_to_the_orchestrator_in_order(
    tmp_path: Path, smi: list[str]
) -> None:
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    executor, wrapped = composite(tmp_path, smi, nvml)
    steps: list[Step] = [
        SetTaint("reset_gpu"),
        Reset("inc-1", (nvml.gpu_uuids[0],), 1),
        SetStateLabel("unhealthy"),
        Reboot("inc-1", "boot-1", 1),
    ]

    report = executor.apply(steps)

    assert [r.step for r in report.results] == steps
    assert wrapped.applied == [[SetTaint("reset_gpu")], [SetStateLabel("unhealthy")]]
    assert report.results[1].detail == "attempt 1: GPU 0 reset"
    assert report.results[3].detail.startswith("attempt 1: reboot requested")
    assert (tmp_path / "reboot-required").exists()


def test_a_dry_run_performs_no_recovery(tmp_path: Path, smi: list[str]) -> None:
    executor, _ = composite(tmp_path, smi, FakeNvml("h100_sxm", 2, seed=3))

    report = executor.apply([Reset("inc-1", (), 1), Reboot("inc-1", "boot-1", 1)], dry_run=True)

    assert all(r.ok and r.detail.startswith("dry run: would") for r in report.results)
    assert resets(tmp_path) == [] and not (tmp_path / "reboot-required").exists()


def test_facts_add_the_finished_drain_and_the_boot_id(tmp_path: Path, smi: list[str]) -> None:
    executor, wrapped = composite(tmp_path, smi, FakeNvml("h100_sxm", 2, seed=3))
    wrapped.drain_state = DrainState("inc-1", "running")

    assert executor.facts() == NodeFacts(drained_incident="inc-1", boot_id="boot-1")
    wrapped.drain_state = DrainState("inc-1", "incomplete")
    assert executor.facts().drain_finished_incident == "inc-1"


def test_validation_after_a_reboot_says_the_node_came_back_and_clears_the_sentinel(
    tmp_path: Path, smi: list[str]
) -> None:
    executor, _ = composite(tmp_path, smi, FakeNvml("h100_sxm", 2, seed=3))
    (tmp_path / "reboot-required").write_text("gpuhealth inc-1\n")

    (result,) = executor.apply([Validate("inc-1", after="reboot")]).results

    assert result.ok and result.detail.startswith("node came back (new boot id); no diagnostic")
    assert not (tmp_path / "reboot-required").exists()


def test_the_orchestrator_executors_extras_stay_reachable(tmp_path: Path, smi: list[str]) -> None:
    """The loop finds drain_updates / drain_state through the composite; close closes the wrapped one."""
    executor, wrapped = composite(tmp_path, smi, FakeNvml("h100_sxm", 2, seed=3))

    assert executor.drain_updates() == [] and executor.drain_state is None
    executor.close()
    assert wrapped.closed
