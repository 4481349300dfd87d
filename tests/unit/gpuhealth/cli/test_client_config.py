"""The on-call commands' ``client:`` configuration: read as documented, and a typo in a key or a section is
one line naming it (it used to be ignored, leaving the default URL and no token)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from gpuhealth.cli.errors import CliError
from gpuhealth.cli.fleet_cmd import resolve_connection


def _args(config: Path) -> argparse.Namespace:
    return argparse.Namespace(url=None, token=None, config=str(config), ca_file=None, client_cert=None)


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "gpuhealth.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_documented_keys_are_read(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        {
            "client": {"aggregator_url": "https://agg:8470", "token": "t0k", "ca_file": "/ca.pem"},
            "aggregator": {"port": 8470},
            "checks": {},
        },
    )
    connection = resolve_connection(_args(config), environ={})
    assert (connection.url, connection.token, str(connection.ca_file)) == (
        "https://agg:8470",
        "t0k",
        "/ca.pem",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"client": {"aggregator-url": "https://agg:8470"}}, "unknown key client.aggregator-url (known: "),
        ({"client": {"tokenfile": "/t"}}, "unknown key client.tokenfile"),
        ({"cilent": {"aggregator_url": "https://agg:8470"}}, "unknown section 'cilent'"),
    ],
)
def test_an_unknown_key_or_section_is_one_line_naming_it(tmp_path: Path, data: object, message: str) -> None:
    config = _write(tmp_path, data)
    with pytest.raises(CliError) as caught:
        resolve_connection(_args(config), environ={})
    assert str(caught.value).startswith(f"{config}: ")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 1
