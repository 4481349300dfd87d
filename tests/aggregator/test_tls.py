"""TLS end to end: the aggregator serves HTTPS with a throw-away CA's certificate; the agent's client and the
CLI verify it with the CA file and fail with one line without it; with client certificates required, a
client without one is refused in the handshake. Plain HTTP on a non-loopback address is refused at start
unless explicitly allowed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog
from certificates import TlsFiles, write_tls_files
from executor_defaults import PerfectNode
from live_aggregator import LiveAggregator

from agent.settings import AgentSettings, HttpSettings
from agent.uplink.client import (
    AggregatorClient,
    AggregatorError,
    AggregatorUnreachable,
    tls_context,
)
from agent.wiring import build_agent
from aggregator.auth.chain import build_chain
from aggregator.server import tls_options
from aggregator.settings import load_settings
from core.clock import ManualClock
from core.settings import SettingsError
from core.settings import SettingsError as AgentSettingsError
from gpuhealth.cli.main import main as cli_main
from sim.fakes.nvml import FakeNvml
from tests.aggregator.builders import TOKEN

NODE = "gpu-node-0"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return write_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=datetime(2026, 3, 1, tzinfo=UTC))


def _serve(tmp_path: Path, clock: ManualClock, tls: TlsFiles, **settings: object) -> LiveAggregator:
    return LiveAggregator(
        tmp_path / "aggregator.db",
        clock,
        TOKEN,
        tls_cert_file=tls.server_cert,
        tls_key_file=tls.server_key,
        **settings,
    ).start()


@pytest.fixture
def https(tmp_path: Path, clock: ManualClock, tls: TlsFiles) -> Iterator[LiveAggregator]:
    live = _serve(tmp_path, clock, tls)
    yield live
    live.stop()


@pytest.fixture
def mutual(tmp_path: Path, clock: ManualClock, tls: TlsFiles) -> Iterator[LiveAggregator]:
    live = _serve(tmp_path, clock, tls, tls_client_ca_file=tls.ca)
    yield live
    live.stop()


def _client_of(live: LiveAggregator, **tls_files: Path) -> AggregatorError | str:
    """What a client with these TLS files gets from the fleet summary: "ok", or the error it raised."""
    try:
        with AggregatorClient(live.url, TOKEN, retries=1, verify=tls_context(**tls_files)) as client:
            client.summary()
    except AggregatorError as exc:
        return exc
    return "ok"


def test_a_client_with_the_ca_file_talks_https(https: LiveAggregator, tls: TlsFiles) -> None:
    assert https.url.startswith("https://")
    assert _client_of(https, ca_file=tls.ca) == "ok"


def test_a_client_without_the_ca_fails_with_one_line_naming_tls(https: LiveAggregator) -> None:
    error = _client_of(https)  # the system's CAs only: the throw-away CA is not among them
    assert isinstance(error, AggregatorUnreachable)
    message = str(error)
    assert "\n" not in message
    assert f"TLS with the aggregator at {https.url} failed: certificate verify failed" in message
    assert "give the CA file" in message


def test_another_ca_is_refused_too(https: LiveAggregator, tmp_path: Path) -> None:
    other = write_tls_files(tmp_path / "other")
    error = _client_of(https, ca_file=other.ca)
    assert isinstance(error, AggregatorUnreachable)
    assert "certificate verify failed" in str(error)


def test_required_client_certificates_refuse_a_client_without_one(
    mutual: LiveAggregator, tls: TlsFiles
) -> None:
    error = _client_of(mutual, ca_file=tls.ca)
    assert isinstance(error, AggregatorUnreachable), error
    assert "\n" not in str(error)
    assert "require a client certificate" in str(error) or "certificate required" in str(error), error
    assert _client_of(mutual, ca_file=tls.ca, cert_file=tls.client_cert, key_file=tls.client_key) == "ok"


def test_a_client_certificate_from_another_ca_is_refused(
    mutual: LiveAggregator, tls: TlsFiles, tmp_path: Path
) -> None:
    other = write_tls_files(tmp_path / "other")
    error = _client_of(mutual, ca_file=tls.ca, cert_file=other.client_cert, key_file=other.client_key)
    assert isinstance(error, AggregatorUnreachable)


def _agent_settings(tmp_path: Path, url: str, **section: object) -> AgentSettings:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return AgentSettings(
        node_name=NODE,
        state_dir=tmp_path / "state",
        http=HttpSettings(enabled=False),
        aggregator={"url": url, "token_file": token_file, **section},
    )


def test_the_agent_reports_over_https_with_its_ca_file(
    https: LiveAggregator, tls: TlsFiles, tmp_path: Path, clock: ManualClock
) -> None:
    settings = _agent_settings(tmp_path, https.url, ca_file=tls.ca)
    nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
    agent = build_agent(settings, library=nvml, clock=clock, executor=PerfectNode())
    try:
        agent.tick()
        link = agent.parts.link
        assert link is not None
        assert link.deliver() == 1
    finally:
        agent.close()
    assert link.stats.accepted == 1


def test_the_agent_without_the_ca_delivers_nothing(
    https: LiveAggregator, tmp_path: Path, clock: ManualClock
) -> None:
    settings = _agent_settings(tmp_path, https.url)
    nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
    agent = build_agent(settings, library=nvml, clock=clock, executor=PerfectNode())
    try:
        agent.tick()
        link = agent.parts.link
        assert link is not None
        assert link.deliver() == 0
        assert link.stats.accepted == 0
        assert link.outbox.stats().queued == 1  # kept on disk for when the CA is fixed
    finally:
        agent.close()


def test_an_agent_ca_file_that_cannot_be_read_fails_at_start_naming_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    settings = _agent_settings(tmp_path, "https://127.0.0.1:1", ca_file=tmp_path / "missing.pem")
    with pytest.raises(AgentSettingsError, match=r"cannot load the CA file .*missing\.pem"):
        build_agent(settings, library=FakeNvml("h100_sxm", 8, seed=7), clock=clock, executor=PerfectNode())


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = structlog.get_config()  # main() configures logging for the process, as an entry point should
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli_main([*args])
    finally:
        structlog.configure(**saved)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_verifies_with_ca_file_and_fails_without_in_one_line(
    https: LiveAggregator, tls: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPUHEALTH_CA_FILE", "GPUHEALTH_CONFIG", "GPUHEALTH_CLIENT_CERT", "GPUHEALTH_CLIENT_KEY"):
        monkeypatch.delenv(name, raising=False)
    base = ("status", "--json", "--url", https.url, "--token", TOKEN)
    code, out, _ = _cli(*base, "--ca-file", str(tls.ca))
    assert code == 0
    assert json.loads(out)["silences"] == []

    code, out, err = _cli(*base)
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "certificate verify failed" in err, err

    monkeypatch.setenv("GPUHEALTH_CA_FILE", str(tls.ca))
    assert _cli(*base)[0] == 0


def test_the_cli_presents_a_client_certificate_when_asked(
    mutual: LiveAggregator, tls: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPUHEALTH_CA_FILE", "GPUHEALTH_CONFIG", "GPUHEALTH_CLIENT_CERT", "GPUHEALTH_CLIENT_KEY"):
        monkeypatch.delenv(name, raising=False)
    base = ("status", "--json", "--url", mutual.url, "--token", TOKEN, "--ca-file", str(tls.ca))
    code, _, err = _cli(*base)
    assert code != 0 and err.count("\n") == 1, err
    cert = ("--client-cert", str(tls.client_cert), "--client-key", str(tls.client_key))
    assert _cli(*base, *cert)[0] == 0


def test_plain_http_on_a_non_loopback_address_is_refused_unless_allowed() -> None:
    with pytest.raises(SettingsError, match=r"plain HTTP on 0\.0\.0\.0 would send every token in clear"):
        load_settings(environ={}, host="0.0.0.0", token=TOKEN)
    with pytest.raises(SettingsError, match=r"plain HTTP on gpuhealth\.example"):
        load_settings(environ={}, host="gpuhealth.example", token=TOKEN)
    for loopback in ("127.0.0.1", "::1", "localhost"):
        assert load_settings(environ={}, host=loopback, token=TOKEN).host == loopback
    allowed = load_settings(environ={}, host="0.0.0.0", token=TOKEN, allow_plain_http=True)
    assert allowed.allow_plain_http


def test_tls_on_a_non_loopback_address_needs_no_exception(tls: TlsFiles) -> None:
    settings = load_settings(
        environ={},
        host="0.0.0.0",
        token=TOKEN,
        tls_cert_file=tls.server_cert,
        tls_key_file=tls.server_key,
    )
    assert set(tls_options(settings)) == {"ssl_certfile", "ssl_keyfile"}


def test_incomplete_or_unloadable_tls_settings_are_one_line_errors(tls: TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="tls_cert_file and tls_key_file go together"):
        load_settings(environ={}, token=TOKEN, tls_cert_file=tls.server_cert)
    with pytest.raises(SettingsError, match="tls_client_ca_file needs tls_cert_file"):
        load_settings(environ={}, token=TOKEN, tls_client_ca_file=tls.ca)
    mismatched = load_settings(
        environ={}, token=TOKEN, tls_cert_file=tls.server_cert, tls_key_file=tls.client_key
    )
    with pytest.raises(SettingsError, match="cannot load tls_cert_file"):
        tls_options(mismatched)
    missing_ca = load_settings(
        environ={},
        token=TOKEN,
        tls_cert_file=tls.server_cert,
        tls_key_file=tls.server_key,
        tls_client_ca_file=tmp_path / "nope.pem",
    )
    with pytest.raises(SettingsError, match=r"cannot load tls_client_ca_file .*nope\.pem"):
        tls_options(missing_ca)


def test_the_command_refuses_plain_http_on_all_addresses_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "aggregator.yaml"
    config.write_text(f"aggregator:\n  host: 0.0.0.0\n  token: {TOKEN}\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpuhealth", "aggregator", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "plain HTTP on 0.0.0.0" in done.stderr and "Traceback" not in done.stderr


def test_an_unloadable_kubernetes_ca_file_is_one_line_at_start(tmp_path: Path) -> None:
    settings = load_settings(
        environ={}, kubernetes_api_url="https://127.0.0.1:6443", kubernetes_ca_file=tmp_path / "no-ca.crt"
    )
    with pytest.raises(SettingsError, match=r"cannot load kubernetes_ca_file .*no-ca\.crt"):
        build_chain(settings)


def test_a_plain_http_agent_loads_no_certificates_and_says_its_tls_files_are_unused(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Loading the system's CAs costs tens of milliseconds per agent (a thousand agents of the demo spent a
    third of their start-up there): an http:// link builds no TLS context, and TLS files given for it are
    named in one warning instead of being silently ignored."""
    settings = _agent_settings(tmp_path, "http://127.0.0.1:1", ca_file=tmp_path / "missing.pem")
    with structlog.testing.capture_logs() as logs:
        agent = build_agent(
            settings, library=FakeNvml("h100_sxm", 1, node_name=NODE), clock=clock, executor=PerfectNode()
        )
    try:
        assert [e["reason"] for e in logs if e["event"] == "aggregator_tls_files_unused"] == [
            "aggregator.url is plain HTTP"
        ]
    finally:
        agent.close()
