"""Authenticators: each turns a bearer token into a :class:`Principal`, or answers None (not mine).

Every comparison is constant-time (``hmac.compare_digest``) over every candidate, so the answer's timing
says nothing about which entry, or how much of a token, matched.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from aggregator.auth.principal import AuthMethod, Principal, Role
from aggregator.auth.token_file import MIN_TOKEN_LENGTH, TokenEntry, token_sha256

SHARED_TOKEN_NAME = "shared-token"  # noqa: S105 - an identity's name, not a secret


class Authenticator(Protocol):
    """One way of proving who one is."""

    def authenticate(self, token: str) -> Principal | None:
        """The caller this token identifies, or None when this authenticator does not know it."""


class TokenFileAuthenticator:
    """Per-identity tokens, known only by their SHA-256 (from the token file)."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self._entries = [(bytes.fromhex(entry.sha256), entry) for entry in entries]

    def authenticate(self, token: str) -> Principal | None:
        if len(token) < MIN_TOKEN_LENGTH:
            return None
        given = bytes.fromhex(token_sha256(token))
        found: TokenEntry | None = None
        for digest, entry in self._entries:
            if hmac.compare_digest(given, digest):  # no early exit: every entry is compared
                found = entry
        if found is None:
            return None
        return Principal(name=found.name, role=found.role, method=AuthMethod.TOKEN_FILE, node=found.node)


class SharedTokenAuthenticator:
    """The deprecated single ``token`` setting: whoever holds it may act as any node and with ``role``."""

    def __init__(self, token: str, role: Role) -> None:
        self._digest = bytes.fromhex(token_sha256(token))
        self._role = role

    def authenticate(self, token: str) -> Principal | None:
        if not hmac.compare_digest(bytes.fromhex(token_sha256(token)), self._digest):
            return None
        return Principal(
            name=SHARED_TOKEN_NAME, role=self._role, method=AuthMethod.SHARED_TOKEN, any_node=True
        )
