"""Help and messages of the command line: a summary for every command, required options marked, defaults
shown, global options after the command too, a bad --url in one line, and ``gpuhealth aggregator`` saying
where it listens and which database it uses, or in one line that its port is taken."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from waiting import SLOW_HANG_GUARD_S

from gpuhealth.cli.main import build_parser, main

GPUHEALTH = Path(sys.executable).parent / "gpuhealth"


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    out: str = capsys.readouterr().out
    return out


def test_every_command_has_a_one_line_summary_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {action.dest: action.help for action in commands._choices_actions}
    for name, command in commands.choices.items():
        assert summaries.get(name), f"{name} has no summary in 'gpuhealth --help'"
        assert "\n" not in str(summaries[name])
        assert command.description, f"'gpuhealth {name} --help' says nothing of what it does"
    status = " ".join(_help(capsys, "status").split())
    assert "fleet summary from the aggregator" in status


def test_required_options_are_marked_and_defaults_shown(capsys: pytest.CaptureFixture[str]) -> None:
    quarantine = " ".join(_help(capsys, "quarantine").split())
    assert "--reason REASON why (recorded in the history) (required)" in quarantine
    status = " ".join(_help(capsys, "status").split())
    assert "seconds to wait for the aggregator (default: 10.0)" in status
    assert "global options (also before the command)" in status and "--debug" in status
    silence = " ".join(_help(capsys, "silence").split())
    assert "(required to silence)" in silence


def test_global_options_work_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--log-level", "bogus", "--url", "http://127.0.0.1:9"]) == 2
    assert "unknown log level 'bogus'" in capsys.readouterr().err
    assert main(["status", "--debug", "--log-format", "json", "--url", "http://127.0.0.1:9"]) == 1
    assert "cannot reach the aggregator" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http//x:8470", "it must begin with http:// or https://"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://h:99999", "Port out of range 0-65535"),
        ("https://", "it names no host"),
    ],
)
def test_a_malformed_url_is_one_line_not_an_internal_error(
    url: str, problem: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUHEALTH_AGGREGATOR_URL", raising=False)
    assert main(["node", "n1", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err == f"gpuhealth: error: --url: {url!r} is not an aggregator URL ({problem})\n"
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_URL", url)
    assert main(["status"]) == 2
    assert "GPUHEALTH_AGGREGATOR_URL: " in capsys.readouterr().err


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "aggregator.yaml"
    database = f"sqlite:///{tmp_path / 'agg.db'}"
    config.write_text(yaml.safe_dump({"aggregator": {"allow_anonymous": True, "database_url": database}}))
    return config


def test_a_port_in_use_is_one_line_in_our_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = main(["aggregator", "--config", str(_config(tmp_path)), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        err
        == f"gpuhealth: error: cannot listen on 127.0.0.1:{port}: the address is in use (another aggregator?)\n"
    )
    assert not (tmp_path / "agg.db").exists()  # refused before the database was opened


@pytest.mark.slow
def test_the_aggregator_says_where_it_listens_and_which_database(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUHEALTH_")}
    command = [str(GPUHEALTH), "aggregator", "--config", str(_config(tmp_path)), "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # bounded by the test's timeout
    finally:
        process.terminate()
        process.wait(SLOW_HANG_GUARD_S)
    assert line == (
        f"gpuhealth aggregator listening on http://127.0.0.1:{port}, database SQLite {tmp_path / 'agg.db'}\n"
    )
