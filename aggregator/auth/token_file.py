"""The file of hashed tokens: one entry per identity, with the SHA-256 of its token, never the token.

It is meant to be a mounted Secret (Kubernetes) or a template rendered from Vault (Nomad). YAML or JSON
(JSON is YAML), for example::

    tokens:
      - {name: gpu-node-3, role: agent, node: gpu-node-3, sha256: 9f86d0...}
      - {name: ana, role: operator, sha256: 60303a...}

``python -m aggregator.auth.hash_token`` (the token on standard input) prints the hash of a token.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aggregator.auth.principal import Role
from aggregator.settings import MIN_TOKEN_LENGTH
from core.aggregator_api import NODE_NAME_PATTERN
from core.settings import SettingsError

__all__ = ["MIN_TOKEN_LENGTH", "TokenEntry", "TokenFileError", "load_token_file", "token_sha256"]


class TokenFileError(SettingsError):
    """The token file is missing, unreadable or invalid (the message never contains a hash)."""


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token, as the token file stores it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenEntry(BaseModel):
    """One identity: who it is, its role, the node an agent acts for, its token's hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._@:+-]+$")]
    role: Role
    node: Annotated[str, Field(pattern=NODE_NAME_PATTERN, max_length=253)] | None = None
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

    @model_validator(mode="after")
    def _agents_name_their_node(self) -> TokenEntry:
        if self.role is Role.AGENT and self.node is None:
            raise ValueError(f"{self.name}: an agent entry must name its node")
        if self.role is not Role.AGENT and self.node is not None:
            raise ValueError(f"{self.name}: only an agent entry names a node")
        return self


class _TokenFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: list[TokenEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> _TokenFile:
        names = [entry.name for entry in self.tokens]
        if len(set(names)) != len(names):
            raise ValueError("names must be unique")
        if len({entry.sha256 for entry in self.tokens}) != len(self.tokens):
            raise ValueError("two entries share one token hash")
        return self


def load_token_file(path: Path) -> list[TokenEntry]:
    """Every entry of the file; raises TokenFileError naming the file and the problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot read the token file: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise TokenFileError(f"{path}: the token file is not valid YAML or JSON") from exc
    try:
        return _TokenFile.model_validate(data or {}).tokens
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        # The message names the field, never its value: a hash is not a secret, but keep the file private.
        raise TokenFileError(
            f"{path}: invalid token file{' at ' + where if where else ''}: {message}"
        ) from None
