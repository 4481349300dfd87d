"""Remembered answers of the authenticators that ask another server (TokenReview, Nomad, OIDC).

Keyed by the token's SHA-256, so no token is kept. The cache also lets a request be authenticated on the
event loop without a thread hop when the answer is already known: every agent report goes through here.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from aggregator.auth.principal import Principal
from aggregator.auth.token_file import token_sha256


class Unknown(enum.Enum):
    """The answer is not remembered: finding it out needs a call to another server."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN


class AnswerCache:
    """Answers (a principal, or None for "not one of ours") until a time on ``clock``."""

    def __init__(self, clock: Callable[[], float], max_entries: int) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[float, Principal | None]] = {}

    def now(self) -> float:
        """The cache's clock (the time expiry times are on)."""
        return self._clock()

    def get(self, token: str) -> Principal | Unknown | None:
        """The remembered answer for ``token``, or UNKNOWN when there is none or it expired."""
        with self._lock:
            cached = self._answers.get(token_sha256(token))
        if cached is None or cached[0] <= self._clock():
            return UNKNOWN
        return cached[1]

    def put(self, token: str, principal: Principal | None, until: float) -> None:
        """Remember ``principal`` as the answer for ``token`` until ``until``."""
        with self._lock:
            if len(self._answers) >= self._max_entries:
                self._answers.clear()  # crude but bounded: a flood of tokens cannot grow memory
            self._answers[token_sha256(token)] = (until, principal)
