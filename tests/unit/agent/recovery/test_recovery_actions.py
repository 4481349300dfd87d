"""The node's recovery actions and the steps' executor around them: a validation's diagnostic on its own
thread (pending, then collected once; started again by a new agent), the withdrawal of a reboot that never
came, the hint after a failed attempt, an injected command runner, and the simulated node of the demo."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from waiting import HANG_GUARD_S

from agent.recovery.actions import HostActions
from agent.recovery.background import BackgroundValidation
from agent.recovery.commands import CommandOutcome
from agent.recovery.executor import LocalRecovery, LocalRecoveryParts
from agent.recovery.reset import GpuResetter, GpuTarget
from agent.recovery.settings import RebootSettings, RecoverySettings
from agent.recovery.validation import ValidationOutcome
from core.clock import ManualClock
from core.steps import Reboot, Reset, Validate, WithdrawReboot
from remediation.plan.recovery import RecoveryRules
from sim.fakes.nvml import FakeNvml
from sim.simulated_recovery import SimulatedNodeRecovery

INCIDENT = "inc-1"


class GatedDiagnostic:
    """A validator whose diagnostic runs until the test opens its gate (a stand-in for ``dcgmi diag``)."""

    def __init__(self, passed: bool = True) -> None:
        self.gate = threading.Event()
        self.runs = 0
        self.passed = passed

    def immediate(self) -> ValidationOutcome | None:
        return None

    def validate(self) -> ValidationOutcome:
        self.runs += 1
        assert self.gate.wait(HANG_GUARD_S), "the test never opened the gate"
        return ValidationOutcome(self.passed, "diag passed" if self.passed else "diag failed: memory")


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    return tmp_path / "reboot-required"


def host(tmp_path: Path, validator: GatedDiagnostic | None = None, runner: object = None) -> HostActions:
    (tmp_path / "boot_id").write_text("boot-1\n")
    settings = RecoverySettings(
        reset_command=["reset-tool", "--gpu", "{index}", "--uuid", "{uuid}"],
        reset_timeout_s=7.0,
        reboot=RebootSettings(sentinel_path=tmp_path / "reboot-required"),
        boot_id_path=tmp_path / "boot_id",
    )
    kwargs: dict[str, object] = {"validator": validator or GatedDiagnostic()}
    if runner is not None:
        kwargs["runner"] = runner
    return HostActions(settings, **kwargs)  # type: ignore[arg-type]


def local(actions: HostActions, nvml: FakeNvml, wake: threading.Event | None = None) -> LocalRecovery:
    parts = LocalRecoveryParts(
        resetter=GpuResetter(nvml, actions.reset_gpu),
        actions=actions,
        rules=RecoveryRules(max_attempts=2, retry_backoff_s=60.0),
    )
    return LocalRecovery("gpu-node-0", parts, wake=wake)


# --- validation in the background -------------------------------------------------------------------------


def test_a_diagnostic_runs_in_the_background_and_its_outcome_is_collected_once(tmp_path: Path) -> None:
    """Validate answers at once with a pending result while the diagnostic runs; the running incident is
    visible (for the facts); when it ends the wake event is set and the next Validate returns its outcome,
    once — a further Validate starts a new run."""
    diagnostic = GatedDiagnostic()
    wake = threading.Event()
    recovery = local(host(tmp_path, diagnostic), FakeNvml("h100_sxm", 2, seed=3), wake)
    step = Validate(INCIDENT, after="reset")

    started = recovery.apply(step)
    assert started.pending and started.ok and "started in the background" in started.detail
    assert recovery.validation.running == INCIDENT
    diagnostic.gate.set()
    assert recovery.validation.wait(HANG_GUARD_S)
    assert wake.is_set()  # the loop runs a pass now to collect the outcome

    collected = recovery.apply(step)
    assert (collected.ok, collected.pending, collected.detail) == (True, False, "diag passed")
    assert recovery.validation.running is None
    assert recovery.apply(step).pending  # the outcome was handed out: a new run starts
    assert recovery.validation.wait(HANG_GUARD_S) and diagnostic.runs == 2


def test_a_failed_diagnostic_is_collected_as_a_failed_validation(tmp_path: Path) -> None:
    diagnostic = GatedDiagnostic(passed=False)
    diagnostic.gate.set()
    recovery = local(host(tmp_path, diagnostic), FakeNvml("h100_sxm", 2, seed=3))
    recovery.apply(Validate(INCIDENT, after="reset"))
    assert recovery.validation.wait(HANG_GUARD_S)

    result = recovery.apply(Validate(INCIDENT, after="reset"))

    assert not result.ok and not result.pending and result.detail == "diag failed: memory"


def test_an_outcome_is_only_handed_to_its_own_incident() -> None:
    background = BackgroundValidation("gpu-node-0")
    assert background.start("inc-a", lambda: ValidationOutcome(True, "ok")) is None
    assert background.wait(HANG_GUARD_S)

    assert background.take("inc-b") is None
    assert background.take("inc-a") == ValidationOutcome(True, "ok")


def test_one_run_at_a_time() -> None:
    gate = threading.Event()
    background = BackgroundValidation("gpu-node-0")

    def slow() -> ValidationOutcome:
        gate.wait(HANG_GUARD_S)
        return ValidationOutcome(True, "ok")

    assert background.start("inc-a", slow) is None
    assert background.start("inc-b", slow) == "the validation of inc-a is still running"
    gate.set()
    assert background.wait(HANG_GUARD_S)


def test_a_crashing_diagnostic_leaves_the_decision_to_the_readings() -> None:
    """A bug in the validation is no GPU fault: the outcome passes and says it could not run."""
    background = BackgroundValidation("gpu-node-0")

    def broken() -> ValidationOutcome:
        raise RuntimeError("boom")

    background.start(INCIDENT, broken)
    assert background.wait(HANG_GUARD_S)
    outcome = background.take(INCIDENT)

    assert outcome is not None and outcome.passed and "could not run (RuntimeError)" in outcome.detail


def test_a_new_agent_knows_no_run_and_starts_the_diagnostic_again(tmp_path: Path) -> None:
    """The agent process died mid-run: the next one's Validate starts a fresh diagnostic (pending)."""
    diagnostic = GatedDiagnostic()
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    first = local(host(tmp_path, diagnostic), nvml)
    assert first.apply(Validate(INCIDENT, after="reset")).pending

    second = local(host(tmp_path, diagnostic), nvml)
    assert second.validation.running is None
    assert second.apply(Validate(INCIDENT, after="reset")).pending
    diagnostic.gate.set()
    assert first.validation.wait(HANG_GUARD_S) and second.validation.wait(HANG_GUARD_S)
    assert diagnostic.runs == 2


# --- attempts: hints, withdrawal, the injected runner ----------------------------------------------------


def test_a_failed_attempt_says_when_the_next_one_comes_or_that_none_is_left(tmp_path: Path) -> None:
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    nvml.lose_gpu(0)  # the reset is refused: only a reboot brings a lost GPU back
    recovery = local(host(tmp_path), nvml)

    first = recovery.apply(Reset(INCIDENT, (nvml.gpu_uuids[0],), attempt=1))
    last = recovery.apply(Reset(INCIDENT, (nvml.gpu_uuids[0],), attempt=2))

    assert not first.ok and first.detail.endswith("; next attempt in 60 s")
    assert not last.ok and last.detail.endswith("; no attempt left: escalating to replace")


def test_withdrawing_an_overdue_reboot_removes_kureds_sentinel_and_fails_the_attempt(
    tmp_path: Path, sentinel: Path
) -> None:
    recovery = local(host(tmp_path), FakeNvml("h100_sxm", 2, seed=3))
    assert recovery.apply(Reboot(INCIDENT, "boot-1", attempt=1)).ok and sentinel.exists()

    result = recovery.apply(WithdrawReboot(INCIDENT, attempt=1, waited_s=1800.0))

    assert not result.ok
    assert result.detail == (
        f"attempt 1: no reboot within 1800 s (same boot id); {sentinel} removed; next attempt in 60 s"
    )
    assert not sentinel.exists()


def test_the_reset_and_reboot_commands_go_through_an_injected_runner(tmp_path: Path) -> None:
    """A caller may run the commands its own way: the runner gets the filled argv and the timeout."""
    calls: list[tuple[list[str], float]] = []

    def runner(argv: Sequence[str], timeout_s: float) -> CommandOutcome:
        calls.append((list(argv), timeout_s))
        return CommandOutcome(ok=True, detail="done", exit_code=0)

    actions = host(tmp_path, runner=runner)

    assert actions.reset_gpu(GpuTarget(index=5, uuid="GPU-x")).ok
    assert calls == [(["reset-tool", "--gpu", "5", "--uuid", "GPU-x"], 7.0)]
    assert actions.boot_id() == "boot-1"


# --- the simulated node ------------------------------------------------------------------------------------


def test_a_simulated_reset_clears_the_fake_gpus_fault_and_refuses_a_lost_gpu() -> None:
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    nvml.set_row_remap(1, pending=True, uncorrectable=1)
    nvml.lose_gpu(0)
    node = SimulatedNodeRecovery(nvml, node="sim-0")

    reset = node.reset_gpu(GpuTarget(1, nvml.gpu_uuids[1]))
    refused = node.reset_gpu(GpuTarget(0, nvml.gpu_uuids[0]))

    assert reset.ok and nvml.gpu(1).remap_pending is False and node.resets == [1]
    assert not refused.ok and "GPU_IS_LOST" in refused.detail


def test_a_simulated_reboot_comes_after_its_delay_with_a_new_boot_id_and_the_gpus_back() -> None:
    clock = ManualClock()
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    nvml.lose_gpu(0)
    node = SimulatedNodeRecovery(nvml, node="sim-0", clock=clock, reboot_delay_s=30.0)

    assert node.request_reboot(INCIDENT).detail == "simulated reboot in 30 s"
    clock.advance(29)
    assert node.boot_id() == "sim-0-boot-1" and nvml.gpu(0).lost
    clock.advance(1)
    assert node.boot_id() == "sim-0-boot-2" and not nvml.gpu(0).lost


def test_a_withdrawn_simulated_reboot_never_happens_and_a_node_may_never_reboot() -> None:
    clock = ManualClock()
    nvml = FakeNvml("h100_sxm", 2, seed=3)
    node = SimulatedNodeRecovery(nvml, node="sim-0", clock=clock, reboot_delay_s=30.0)
    node.request_reboot(INCIDENT)

    assert node.withdraw_reboot() == "simulated reboot cancelled"
    clock.advance(60)
    assert node.boot_id() == "sim-0-boot-1"

    node.reboot_delay_s = None  # kured absent
    assert "never reboots" in node.request_reboot(INCIDENT).detail
    clock.advance(3600)
    assert node.boot_id() == "sim-0-boot-1" and node.reboot_requests == 2


def test_the_simulated_validation_passes_by_readings_or_fails_on_demand() -> None:
    node = SimulatedNodeRecovery(FakeNvml("h100_sxm", 2, seed=3), node="sim-0")

    passed = node.validator.immediate()
    node.fail_validation = True
    failed = node.validator.immediate()

    assert passed.passed and "clean readings" in passed.detail
    assert not failed.passed and "failed" in failed.detail
