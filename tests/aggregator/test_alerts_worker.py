"""The delivery worker's pacing: tenacity exponential backoff per sink, capped; token-bucket rate limit."""

from __future__ import annotations

from aggregator.alert_settings import SinkSettings
from aggregator.alerts.worker import TokenBucket, backoff_s


def test_backoff_doubles_from_the_sinks_initial_wait_up_to_its_cap() -> None:
    values = {"name": "s", "type": "webhook", "url": "http://x", "backoff_initial_s": 2, "backoff_max_s": 30}
    sink = SinkSettings.model_validate(values)
    assert [backoff_s(sink, attempt) for attempt in range(1, 7)] == [2, 4, 8, 16, 30, 30]


def test_token_bucket_allows_the_burst_then_the_rate() -> None:
    """Burst 3 at once, then one per second (60 per minute); unused time never exceeds the burst."""
    now = [0.0]
    bucket = TokenBucket(rate_per_s=1.0, burst=3, clock=lambda: now[0])
    assert bucket.available() == 3
    for _ in range(3):
        bucket.take()
    assert bucket.available() == 0
    now[0] = 0.5
    assert bucket.available() == 0
    now[0] = 1.0
    assert bucket.available() == 1
    now[0] = 100.0
    assert bucket.available() == 3
