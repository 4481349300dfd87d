"""The Nomad facade's setup at unit level: TLS and token settings reach python-nomad, the token is read from
NOMAD_TOKEN or a file (never shown), and impossible settings fail with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation.nomad.api import NomadApi, client_options
from remediation.nomad.errors import NomadConfigError
from remediation.nomad.settings import NomadSettings, NomadTlsSettings, nomad_token


def test_tls_files_and_verification_reach_the_client(tmp_path: Path) -> None:
    """CA bundle -> verify=<path>, client cert + key -> cert pair, https -> secure."""
    tls = NomadTlsSettings(
        ca_file=tmp_path / "ca.pem", cert_file=tmp_path / "c.pem", key_file=tmp_path / "k.pem"
    )
    settings = NomadSettings(address="https://nomad.example:4646", tls=tls, namespace="ml", region="eu")

    options = client_options(settings, "secret")

    assert options["verify"] == str(tmp_path / "ca.pem")
    assert options["cert"] == (str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    assert options["secure"] is True
    assert (options["namespace"], options["region"], options["token"]) == ("ml", "eu", "secret")


def test_verification_can_be_turned_off_and_is_on_by_default() -> None:
    assert client_options(NomadSettings(), None)["verify"] is True
    off = NomadSettings(tls=NomadTlsSettings(verify=False, ca_file=Path("/ca.pem")))
    assert client_options(off, None)["verify"] is False


def test_no_client_certificate_means_none_is_sent_even_with_nomad_client_cert_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The settings decide: python-nomad's own fallback to NOMAD_CLIENT_CERT/KEY is not used."""
    monkeypatch.setenv("NOMAD_CLIENT_CERT", "/elsewhere/cert.pem")
    monkeypatch.setenv("NOMAD_CLIENT_KEY", "/elsewhere/key.pem")

    api = NomadApi(NomadSettings(), None)
    try:
        assert api.settings.tls.cert_file is None
        assert client_options(api.settings, None)["cert"] == ("", "")
        assert api._client.cert == ()  # what python-nomad will send
    finally:
        api.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (NomadSettings(address="nomad:4646"), "must start with http:// or https://"),
        (NomadSettings(tls=NomadTlsSettings(cert_file=Path("/c.pem"))), "both cert_file and key_file"),
    ],
)
def test_impossible_settings_fail_with_one_line(settings: NomadSettings, message: str) -> None:
    with pytest.raises(NomadConfigError, match=message):
        client_options(settings, None)


def test_nomad_token_wins_over_the_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    settings = NomadSettings(token_file=token_file)

    assert nomad_token(settings, {"NOMAD_TOKEN": "from-env"}) == "from-env"
    assert nomad_token(settings, {}) == "from-file"
    assert nomad_token(NomadSettings(), {}) is None


def test_an_unreadable_token_file_names_the_file_not_a_token(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(NomadConfigError) as raised:
        nomad_token(NomadSettings(token_file=missing), {})
    assert str(missing) in str(raised.value) and len(str(raised.value).splitlines()) == 1


def test_no_nomad_agent_to_ask_is_one_clear_line() -> None:
    """Nothing listens at the address: the executor cannot learn its node, and says so in one line."""
    from remediation.nomad.connect import connect_nomad_executor
    from remediation.nomad.settings import NomadRetrySettings

    settings = NomadSettings(address="http://127.0.0.1:9", retry=NomadRetrySettings(attempts=1))
    with pytest.raises(NomadConfigError) as raised:
        connect_nomad_executor(settings, environ={})
    message = str(raised.value)
    assert message.startswith("cannot find the local node through the Nomad agent: transport error")
    assert len(message.splitlines()) == 1
