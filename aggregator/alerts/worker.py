"""The delivery worker: threads apart from report ingest, so a slow or dead receiver never delays a report.

One router thread raises ``node_stale`` alerts and routes new alerts to sinks; one thread per sink claims
that sink's due deliveries and POSTs them with httpx. A failed attempt is retried after a tenacity
exponential backoff (per sink settings), stored in the database so it survives a restart; after
``max_attempts`` failures the delivery is dead-lettered (``gpuhealth alerts --failed``). A token bucket per
sink caps the rate. Errors are logged by sink name and HTTP status only: URLs and keys are secrets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
import structlog
from tenacity import RetryCallState, Retrying, wait_exponential

from aggregator.alert_settings import SinkSettings
from aggregator.alerts import outbox, payloads
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import Database

log = structlog.get_logger(__name__)
# httpx logs every request's URL at INFO (httpcore more at DEBUG); sink URLs are secrets.
for _chatty in ("httpx", "httpcore"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

STALE_LOOKBACK = timedelta(days=1)
CLAIM_BATCH = 20


def backoff_s(sink: SinkSettings, failed_attempts: int) -> float:
    """Seconds to wait after the ``failed_attempts``-th failure: tenacity's exponential wait, capped."""
    wait = wait_exponential(multiplier=sink.backoff_initial_s, max=sink.backoff_max_s)
    state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = max(1, failed_attempts)
    return float(wait(state))


class TokenBucket:
    """At most ``rate_per_s`` events per second on average, ``burst`` at once."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def available(self) -> int:
        """Whole tokens available now."""
        current = self._clock()
        self._tokens = min(self._burst, self._tokens + (current - self._last) * self._rate)
        self._last = current
        return int(self._tokens)

    def take(self) -> None:
        """Spend one token."""
        self._tokens -= 1


class DeliveryWorker:
    """Starts the router and the per-sink threads; ``stop()`` ends them (at shutdown)."""

    def __init__(
        self,
        db: Database,
        settings: AggregatorSettings,
        now: Callable[[], datetime],
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._db = db
        self._settings = settings
        self._now = now
        self._transport = transport
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stale_since: datetime | None = None

    def start(self) -> None:
        """Start the threads (daemons: a stuck receiver never keeps the process alive)."""
        loops: list[tuple[str, Callable[[], None]]] = [("alert-router", self._route_loop)]
        loops += [(f"alert-sink-{sink.name}", self._sink_loop(sink)) for sink in self._settings.alert_sinks]
        for name, target in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the threads to end and wait briefly; a delivery in flight finishes or is retried later."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def route_once(self) -> int:
        """Raise stale-node alerts and route new alerts; returns how many alerts were routed."""
        now = self._now()
        since = self._stale_since or now - STALE_LOOKBACK
        with self._db.write() as conn:
            outbox.raise_stale(conn, since, now)
            routed = outbox.route_pending(conn, self._settings, now)
        self._stale_since = now
        return routed

    def deliver_once(self, sink: SinkSettings, client: httpx.Client, bucket: TokenBucket) -> int:
        """Send what is due to ``sink`` within its rate; returns how many attempts were made."""
        allowed = min(bucket.available(), CLAIM_BATCH)
        if allowed <= 0:
            return 0
        lease = sink.timeout_s * 2 + 5
        with self._db.write() as conn:
            due = outbox.claim_due(conn, sink.name, self._now(), limit=allowed, lease_s=lease)
        for item in due:
            bucket.take()
            self._attempt(sink, client, item)
        return len(due)

    def _attempt(self, sink: SinkSettings, client: httpx.Client, item: outbox.Due) -> None:
        request = payloads.build(sink, item.alert, base_url=self._settings.alert_link_url, now=self._now())
        error = _send(client, request)
        now = self._now()
        with self._db.write() as conn:
            if error is None:
                outbox.mark_delivered(conn, item.delivery_id, now)
                log.info("alert delivered", sink=sink.name, kind=item.alert.kind, alert=item.alert.key)
                return
            failed = item.attempts + 1
            retry_at = (
                None if failed >= sink.max_attempts else now + timedelta(seconds=backoff_s(sink, failed))
            )
            outbox.mark_failed(conn, item.delivery_id, error=error, retry_at=retry_at)
        if retry_at is None:
            log.error(
                "alert dead-lettered", sink=sink.name, alert=item.alert.key, attempts=failed, error=error
            )
        else:
            log.warning(
                "alert delivery failed", sink=sink.name, alert=item.alert.key, attempts=failed, error=error
            )

    def _route_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.route_once()
            except Exception as exc:  # noqa: BLE001 - the loop must survive a database outage
                log.error("alert routing failed", error=type(exc).__name__)
            self._stop.wait(self._settings.alert_poll_s)

    def _sink_loop(self, sink: SinkSettings) -> Callable[[], None]:
        def loop() -> None:
            bucket = TokenBucket(sink.rate_per_minute / 60.0, sink.burst)
            with httpx.Client(timeout=sink.timeout_s, transport=self._transport) as client:
                while not self._stop.is_set():
                    try:
                        busy = self.deliver_once(sink, client, bucket)
                    except Exception as exc:  # noqa: BLE001 - the loop must survive a database outage
                        log.error("alert delivery loop failed", sink=sink.name, error=type(exc).__name__)
                        busy = 0
                    if not busy:
                        self._stop.wait(self._settings.alert_poll_s)

        return loop


def _send(client: httpx.Client, request: payloads.Request) -> str | None:
    """POST once; None on a 2xx answer, else a short reason that names neither the URL nor a key."""
    try:
        response = client.post(request.url, content=request.body, headers=request.headers)
    except httpx.TimeoutException:
        return "timed out"
    except httpx.TransportError as exc:
        return f"transport error: {type(exc).__name__}"
    if 200 <= response.status_code < 300:
        return None
    return f"HTTP {response.status_code}"
