"""Settings of the Nomad executor (the ``nomad`` section of the agent's settings) and its token.

The token is never a setting (settings are logged and dumped): it comes from ``NOMAD_TOKEN``, the variable
every Nomad tool reads, else from ``token_file``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from core.settings import SettingsSection
from remediation.executor.token_source import token_from_env_or_file
from remediation.nomad.errors import NomadConfigError

NOMAD_TOKEN_ENV = "NOMAD_TOKEN"  # noqa: S105 - the variable's name, not a secret
DEFAULT_ADDRESS = "http://127.0.0.1:4646"


class NomadTlsSettings(SettingsSection):
    """TLS towards the Nomad agent (mutual TLS when the cluster requires client certificates)."""

    ca_file: Path | None = Field(default=None, description="CA bundle that signed the agent's certificate.")
    cert_file: Path | None = Field(default=None, description="Client certificate, for mutual TLS.")
    key_file: Path | None = Field(default=None, description="The client certificate's key.")
    verify: bool = Field(default=True, description="Verify the agent's certificate (off only for testing).")


class NomadRetrySettings(SettingsSection):
    """How one step is retried against Nomad (connection errors, timeouts, 5xx and 429 only)."""

    attempts: int = Field(default=6, ge=1, description="Most attempts per step, the first included.")
    initial_wait_s: float = Field(
        default=0.2, ge=0, description="Wait after the first failure; doubles after each further one."
    )
    max_wait_s: float = Field(default=5.0, ge=0, description="Longest wait between two attempts.")
    deadline_s: float = Field(
        default=10.0, gt=0, description="Most time one step may take; then it fails for this pass."
    )
    request_timeout_s: float = Field(default=5.0, gt=0, description="Connect and read timeout per request.")


class NomadSettings(SettingsSection):
    """How the agent reaches Nomad when ``orchestrator: nomad`` (the token: NOMAD_TOKEN, else token_file)."""

    address: str = Field(
        default=DEFAULT_ADDRESS, description="The local Nomad client agent's HTTP address (http or https)."
    )
    namespace: str | None = Field(default=None, description="Namespace of the jobs to requeue; unset: all.")
    region: str | None = Field(default=None, description="Region to address; unset: the agent's own.")
    token_file: Path | None = Field(
        default=None, description="File holding the ACL token (NOMAD_TOKEN wins over it)."
    )
    tls: NomadTlsSettings = Field(default_factory=NomadTlsSettings, description="TLS settings.")
    retry: NomadRetrySettings = Field(
        default_factory=NomadRetrySettings, description="Retries of Nomad requests (transport, 5xx, 429)."
    )
    watch_wait_s: float = Field(
        default=60.0, gt=0, le=600, description="Longest wait of one blocking query on the node."
    )
    forbidden_hold_s: float = Field(
        default=300.0,
        ge=0,
        description="After a 403 (token without node:write), seconds before the executor writes again.",
    )


def nomad_token(settings: NomadSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The ACL token: ``NOMAD_TOKEN``, else the first line of ``token_file``; None when neither is set.

    Raises NomadConfigError (naming the file, never the token) when the file cannot be read.
    """
    return token_from_env_or_file(
        NOMAD_TOKEN_ENV,
        settings.token_file,
        os.environ if environ is None else environ,
        unreadable=lambda exc: NomadConfigError(
            f"{settings.token_file}: cannot read the Nomad token file: {exc.strerror or exc}"
        ),
        from_text=_first_line,
    )


def _first_line(text: str) -> str | None:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else None
