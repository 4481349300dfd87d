"""The agent refuses at start a node name the aggregator would refuse (with the aggregator's own rule)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import structlog
from pydantic import ValidationError

from agent.settings import load_settings
from core.aggregator_api import Report, is_accepted_node_name
from core.settings import SettingsError
from gpuhealth.cli.agent_cmd import EXIT_BAD_SETTINGS
from gpuhealth.cli.main import main

BAD_NAMES = ["GPU Node 1", "-edge", "node_", "n" * 254, "node/1"]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("GPUHEALTH_") or name == "NODE_NAME":
            monkeypatch.delenv(name)
    yield
    structlog.reset_defaults()  # main() configures logging onto the captured stderr


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_the_aggregator_refuses_stops_the_agent_with_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("NODE_NAME", name)
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", "http://aggregator:8080")
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("environment: node_name ")
    assert "is not a name the aggregator accepts" in message


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_agents_rule_is_the_aggregators_own(name: str) -> None:
    """Exactly the names the aggregator's report model refuses (one rule, not a copy of it)."""
    assert not is_accepted_node_name(name)
    with pytest.raises(ValidationError) as caught:
        Report.model_validate({"node": name})
    assert ("node",) in [error["loc"] for error in caught.value.errors()]


@pytest.mark.parametrize("name", ["gpu-node-07", "ip-10-0-1-2.ec2.internal", "GPU_Node.1", "a"])
def test_names_the_aggregator_accepts_start(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("NODE_NAME", name)
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", "http://aggregator:8080")
    assert is_accepted_node_name(name)
    assert load_settings(None).node_name == name


def test_without_an_aggregator_any_name_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing carries the name to an aggregator then: a Nomad node called "GPU Node 1" may mark and taint."""
    monkeypatch.setenv("NODE_NAME", "GPU Node 1")
    assert load_settings(None).node_name == "GPU Node 1"


def test_gpuhealth_agent_with_such_a_name_exits_non_zero_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NODE_NAME", "GPU Node 1")
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR__URL", "http://aggregator:8080")
    monkeypatch.setenv("GPUHEALTH_HTTP__ENABLED", "false")

    assert main(["agent"]) == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "node_name 'GPU Node 1'" in err and "Traceback" not in err
