"""The commands the agent runs (dcgmi, journalctl, nvidia-smi and recovery commands) never receive its
credentials: the aggregator token and any other variable whose name says it holds a secret."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from waiting import HANG_GUARD_S, wait_until

from agent.backends.dcgm.dcgmi import DcgmiProcesses
from agent.backends.kernel_log import JournalFollower
from agent.recovery.commands import run_command
from core.child_env import child_environment

TOKEN = "agent-token-0123456789abcdef0123456789"
SECRET_NAMES = (
    "GPUHEALTH_AGGREGATOR_TOKEN",
    "NOMAD_TOKEN",
    "VAULT_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "DB_PASSWORD",
    "OPENAI_API_KEY",
    "GPUHEALTH_NOMAD__TOKEN",
)
# Prints every environment variable name that holds our token's value, then "done".
PRINT_LEAKS = (
    "import os; print(' '.join(sorted(k for k, v in os.environ.items() if v == "
    f"{TOKEN!r}))); print('kept=' + os.environ.get('KEPT', '')); print('done')"
)


@pytest.fixture(autouse=True)
def _secrets_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRET_NAMES:
        monkeypatch.setenv(name, TOKEN)
    monkeypatch.setenv("KEPT", "yes")


def test_the_child_environment_drops_credentials_and_keeps_the_rest() -> None:
    child = child_environment()
    assert not set(SECRET_NAMES) & set(child)
    assert child["KEPT"] == "yes"
    assert child["PATH"]
    assert child_environment({"A_TOKEN": "x", "NODE_NAME": "n1"}) == {"NODE_NAME": "n1"}


def test_a_recovery_command_does_not_see_the_agents_token() -> None:
    outcome = run_command([sys.executable, "-c", PRINT_LEAKS], timeout_s=HANG_GUARD_S)
    assert outcome.ok, outcome.detail
    assert outcome.detail.endswith(": kept=yes done"), outcome.detail  # no variable name before "kept="


def test_dcgmi_runs_do_not_see_the_agents_token() -> None:
    code, stdout, _ = DcgmiProcesses().run([sys.executable, "-c", PRINT_LEAKS], HANG_GUARD_S)
    assert code == 0
    assert stdout.splitlines() == ["", "kept=yes", "done"]


def test_the_journal_follower_does_not_pass_the_agents_token(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = (
        "import os, sys, time; names = sorted(k for k, v in os.environ.items() if v == sys.argv[2]); "
        "open(sys.argv[1], 'w').write(' '.join(names) + '|done'); time.sleep(60)"
    )
    follower = JournalFollower(lambda _event: None, command=(sys.executable, "-c", script, str(seen), TOKEN))
    follower.start()
    try:
        wait_until(lambda: seen.exists() and seen.read_text().endswith("|done"), message="the follower ran")
    finally:
        follower.stop()
    assert seen.read_text() == "|done"
