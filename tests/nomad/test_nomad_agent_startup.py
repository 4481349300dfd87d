"""``gpuhealth agent`` on Nomad when the executor cannot be set up: one line on stderr, a non-zero exit, no
traceback. Driven through the command line's ``main`` with the settings a Nomad job would give it
(``GPUHEALTH_*`` variables)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from gpuhealth.cli.agent_cmd import EXIT_STARTUP_FAILED
from gpuhealth.cli.main import main
from sim.nomad.harness import running_nomad_sim


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """``main`` configures logging onto this test's captured stderr: put the defaults back afterwards."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def nomad_agent_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An agent configured for Nomad, with no token in the environment, no HTTP endpoint and quick retries."""
    monkeypatch.delenv("NOMAD_TOKEN", raising=False)
    monkeypatch.delenv("NODE_NAME", raising=False)
    for name, value in {
        "GPUHEALTH_ORCHESTRATOR": "nomad",
        "GPUHEALTH_STATE_DIR": str(tmp_path / "state"),
        "GPUHEALTH_HTTP__ENABLED": "false",
        "GPUHEALTH_NOMAD__RETRY__ATTEMPTS": "2",
        "GPUHEALTH_NOMAD__RETRY__INITIAL_WAIT_S": "0.05",
        "GPUHEALTH_NOMAD__RETRY__DEADLINE_S": "1",
    }.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_agent(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["agent"])
    return code, capsys.readouterr().err


def test_a_missing_token_file_stops_the_agent_with_one_line_naming_the_file(
    nomad_agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = nomad_agent_env / "secrets" / "nomad_token"
    monkeypatch.setenv("GPUHEALTH_NOMAD__TOKEN_FILE", str(missing))

    code, err = run_agent(capsys)

    assert code == EXIT_STARTUP_FAILED
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpuhealth: error: cannot start the agent: ")
    assert str(missing) in last and "cannot read the Nomad token file" in last


def test_an_unreachable_local_nomad_client_stops_the_agent_with_one_line(
    nomad_agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listens at ``nomad.address``: after its brief retries the agent says it cannot find its node."""
    address = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("GPUHEALTH_NOMAD__ADDRESS", address)

    code, err = run_agent(capsys)

    assert code == EXIT_STARTUP_FAILED
    assert "Traceback" not in err and "internal error" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpuhealth: error: cannot start the agent: cannot find the local node")
    assert "transport error" in last


def test_a_nomad_agent_that_is_not_a_client_stops_the_agent_with_one_line(
    nomad_agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server-only address (``/v1/agent/self`` without ``stats.client``): the agent cannot be on a node."""
    with running_nomad_sim(nodes=1, controllers=False) as sim:
        monkeypatch.setenv("GPUHEALTH_NOMAD__ADDRESS", sim.address)  # the servers' address, not a client's
        code, err = run_agent(capsys)

    assert code == EXIT_STARTUP_FAILED
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("gpuhealth: error: cannot start the agent: ")


def test_setup_errors_are_nomad_errors_not_os_errors() -> None:
    """The agent catches NomadConfigError by name; it must not pass for an OSError (caught by accident)."""
    from remediation.nomad.errors import NomadConfigError, NomadError

    assert issubclass(NomadConfigError, NomadError) and not issubclass(NomadConfigError, OSError)
