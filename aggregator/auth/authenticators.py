"""Authenticators: each turns a bearer token into a :class:`Principal`, or answers None (not mine).

Tokens are looked up by their SHA-256, never compared as text: a lookup's timing can only reveal something
about the hash of what the caller sent, and no one can steer a hash towards a stored one, so it says
nothing about any stored token. That keeps a token file of 10,000 node identities one dict lookup per
request.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from aggregator.auth.answer_cache import Unknown
from aggregator.auth.principal import AuthMethod, Principal, Role
from aggregator.auth.token_file import MIN_TOKEN_LENGTH, TokenEntry, token_sha256

SHARED_TOKEN_NAME = "shared-token"  # noqa: S105 - an identity's name, not a secret


class Authenticator(Protocol):
    """One way of proving who one is."""

    def authenticate(self, token: str) -> Principal | None:
        """The caller this token identifies, or None when this authenticator does not know it."""

    def known_answer(self, token: str) -> Principal | Unknown | None:
        """The same answer when it is known without asking another server, else UNKNOWN (never blocks)."""


class TokenFileAuthenticator:
    """Per-identity tokens, known only by their SHA-256 (from the token file)."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self._by_digest = {
            entry.sha256.lower(): Principal(
                name=entry.name, role=entry.role, method=AuthMethod.TOKEN_FILE, node=entry.node
            )
            for entry in entries
        }

    def authenticate(self, token: str) -> Principal | None:
        if len(token) < MIN_TOKEN_LENGTH:
            return None
        return self._by_digest.get(token_sha256(token))

    def known_answer(self, token: str) -> Principal | Unknown | None:
        return self.authenticate(token)


class SharedTokenAuthenticator:
    """The deprecated single ``token`` setting: whoever holds it may act as any node and with ``role``."""

    def __init__(self, token: str, role: Role) -> None:
        self._digest = token_sha256(token)
        self._principal = Principal(
            name=SHARED_TOKEN_NAME, role=role, method=AuthMethod.SHARED_TOKEN, any_node=True
        )

    def authenticate(self, token: str) -> Principal | None:
        # Hashes compared, as in the token file: equal-length digests, compared in constant time anyway.
        if not hmac.compare_digest(token_sha256(token), self._digest):
            return None
        return self._principal

    def known_answer(self, token: str) -> Principal | Unknown | None:
        return self.authenticate(token)
