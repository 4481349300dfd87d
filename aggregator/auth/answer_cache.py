"""Remembered answers of the authenticators that ask another server (TokenReview, Nomad, OIDC).

Keyed by the token's SHA-256, so no token is kept. The cache also lets a request be authenticated on the
event loop without a thread hop when the answer is already known: every agent report goes through here.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import TypeVar

from aggregator.auth.principal import Principal
from aggregator.auth.token_file import token_sha256


class Unknown(enum.Enum):
    """The answer is not remembered: finding it out needs a call to another server."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN
Answer = TypeVar("Answer", Principal, None)


class AnswerCache:
    """Answers (a principal, or None for "not one of ours") until a time on ``clock``.

    Principals and refusals are kept apart, each bounded by ``max_entries``: a flood of made-up tokens fills
    the refusals only, so the agents' answers stay and no agent is reviewed again for it. When one part is
    full, its lapsed answers go first, then the oldest half.
    """

    def __init__(self, clock: Callable[[], float], max_entries: int) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, Principal]] = {}
        self._refused: dict[str, tuple[float, None]] = {}

    def now(self) -> float:
        """The cache's clock (the time expiry times are on)."""
        return self._clock()

    def get(self, token: str) -> Principal | Unknown | None:
        """The remembered answer for ``token``, or UNKNOWN when there is none or it expired."""
        key = token_sha256(token)
        with self._lock:
            cached = self._known.get(key) or self._refused.get(key)
        if cached is None or cached[0] <= self._clock():
            return UNKNOWN
        return cached[1]

    def put(self, token: str, principal: Principal | None, until: float) -> None:
        """Remember ``principal`` as the answer for ``token`` until ``until``."""
        key = token_sha256(token)
        with self._lock:
            if principal is None:
                self._refused = self._room(self._refused)
                self._refused[key] = (until, None)
                self._known.pop(key, None)
            else:
                self._known = self._room(self._known)
                self._known[key] = (until, principal)
                self._refused.pop(key, None)

    def _room(self, answers: dict[str, tuple[float, Answer]]) -> dict[str, tuple[float, Answer]]:
        """``answers`` with room for one more: the lapsed ones dropped, then the oldest half if need be."""
        if len(answers) < self._max_entries:
            return answers
        now = self._clock()
        kept = {key: answer for key, answer in answers.items() if answer[0] > now}
        if len(kept) >= self._max_entries:
            kept = dict(list(kept.items())[len(kept) // 2 :])  # insertion order: the oldest first
        return kept
