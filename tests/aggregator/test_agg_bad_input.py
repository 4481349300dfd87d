"""Bad input is a 4xx and never stored half-valid (docs/aggregator.md): lone surrogates and NUL in a silence,
an oversized selector value, NaN and infinities in a report. Sent raw over HTTP, as a fuzzer or a careless
script would, because the client's own models would refuse them before they leave."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_aggregator import LiveAggregator

from core.clock import ManualClock
from tests.aggregator.builders import report

TOKEN = "bad-input-token-0123456789abcdef0123456789"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveAggregator]:
    server = LiveAggregator(tmp_path / "a.db", ManualClock(), TOKEN).start()
    yield server
    server.stop()


def post(live: LiveAggregator, path: str, body: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    return httpx.post(f"{live.url}{path}", content=body.encode(), headers=headers, timeout=10)


def silences(live: LiveAggregator) -> httpx.Response:
    return httpx.get(f"{live.url}/v1/silences", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)


@pytest.mark.parametrize(
    "body",
    [
        '{"selector": {"zone": "\\ud800"}, "duration_s": 60, "reason": "lone surrogate"}',
        '{"selector": {"zone": "a\\u0000b"}, "duration_s": 60, "reason": "NUL"}',
        '{"selector": {"zone": "a"}, "duration_s": 60, "reason": "\\udfff"}',
        '{"selector": {"\\ud800": "a"}, "duration_s": 60, "reason": "surrogate key"}',
        '{"selector": {"zone": "' + "x" * 900_000 + '"}, "duration_s": 60, "reason": "huge"}',
        '{"selector": {"zone": "a"}, "duration_s": NaN, "reason": "NaN"}',
        '{"selector": {"zone": "a"}, "duration_s": Infinity, "reason": "infinite"}',
    ],
    ids=["lone-surrogate", "nul", "surrogate-reason", "surrogate-key", "900-kb-value", "nan", "infinity"],
)
def test_a_bad_silence_is_refused_and_the_silences_stay_readable(live: LiveAggregator, body: str) -> None:
    answer = post(live, "/v1/silences", body)
    assert 400 <= answer.status_code < 500, answer.text
    listed = silences(live)
    assert listed.status_code == 200 and listed.json() == []


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_report_with_a_non_number_is_refused(live: LiveAggregator, value: str) -> None:
    import json

    body = json.dumps({**report("gpu-node-1", 1), "interval_s": 0.0})
    answer = post(live, "/v1/reports", body.replace('"interval_s": 0.0', f'"interval_s": {value}'))
    assert 400 <= answer.status_code < 500, answer.text
    nodes = httpx.get(f"{live.url}/v1/nodes", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert nodes.json() == []
