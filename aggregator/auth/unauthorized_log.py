"""Refused requests, logged at most once a minute per client address (a scanner, or a compromised node
probing what it may do, cannot flood the log), never with the token: the client address, the reason and
how many were refused since the last line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

WINDOW_S = 60.0
MAX_TRACKED = 1024  # addresses remembered; past this the oldest are forgotten (a bounded dict)


class UnauthorizedLog:
    """Counts refusals per client address and logs the first of each window (as ``event``)."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        event: str = "request refused: not authenticated",
    ) -> None:
        self._monotonic = monotonic
        self._event = event
        self._lock = threading.Lock()
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def refused(self, client: str, reason: str) -> bool:
        """Note one refusal; returns whether it was logged."""
        now = self._monotonic()
        with self._lock:
            last = self._last_logged.get(client)
            if last is not None and now - last < WINDOW_S:
                self._suppressed[client] = self._suppressed.get(client, 0) + 1
                return False
            suppressed = self._suppressed.pop(client, 0)
            self._last_logged.pop(client, None)
            self._last_logged[client] = now
            while len(self._last_logged) > MAX_TRACKED:
                oldest = next(iter(self._last_logged))
                del self._last_logged[oldest]
                self._suppressed.pop(oldest, None)
        log.warning(self._event, client=client, reason=reason, since_last=suppressed)
        return True
