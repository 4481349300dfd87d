"""Delivery to real HTTP receivers on 127.0.0.1 from live aggregator processes: a receiver that is down
gets everything, in order per incident and without duplicates, when it returns, across an aggregator
restart; dead letters are listed and retried by hand; a slow receiver does not slow report ingest; no
secret reaches the logs."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from waiting import wait_until

from tests.aggregator.alert_receiver import Receiver
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import LiveAggregator, StartAggregator
from tests.aggregator.test_agg_cli import GPUHEALTH
from tests.aggregator.test_alerts_payloads import documented_verifier

SECRET = "hmac-Secret-7f3a"
URL_SECRET = "T0KEN-IN-PATH-91c2"
FAST_RETRY = {"backoff_initial_s": 0.1, "backoff_max_s": 0.3, "timeout_s": 5}


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.stop()


def _sink(receiver: Receiver, **values: Any) -> dict[str, Any]:
    return {
        "name": "hook",
        "type": "webhook",
        "url": f"{receiver.url}/{URL_SECRET}",
        "secret": SECRET,
        **FAST_RETRY,
        **values,
    }


def _post(url: str, body: dict[str, Any]) -> float:
    started = time.monotonic()
    response = httpx.post(f"{url}/v1/reports", json=body, headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def _alerts(live: LiveAggregator, **params: Any) -> list[dict[str, Any]]:
    return list(httpx.get(f"{live.url}/v1/alerts", params=params, headers=AUTH, timeout=10).json())


POLL_S = 0.05  # each poll is a request to the aggregator: no need to ask more often


@pytest.mark.slow
def test_down_receiver_gets_every_alert_in_order_once_across_a_restart(
    database_url: str, start_aggregator: StartAggregator, receivers: list[Receiver]
) -> None:
    receiver = Receiver()
    receivers.append(receiver)
    live = start_aggregator(
        database_url=database_url, alert_poll_s=0.05, alert_sinks=[_sink(receiver, max_attempts=1000)]
    )
    for node, incident in (("node-a", "inc-a"), ("node-b", "inc-b")):
        _post(live.url, report(node, 1, "degraded", incident=incident))
        _post(live.url, report(node, 2, "unhealthy", incident=incident))
        _post(live.url, report(node, 3, "healthy"))
    # Both incidents' first alert failed at least twice; the later ones wait behind them (order).
    wait_until(
        lambda: sum(d["attempts"] >= 2 for a in _alerts(live) for d in a["deliveries"]) == 2,
        interval=POLL_S,
        message="two deliveries retried",
    )
    live.kill()
    live.restart()
    receiver.start()

    received = receiver.wait_for(6)
    time.sleep(0.5)  # several more polls: nothing is sent twice
    assert len(receiver.received) == 6
    keys = [item.headers["Idempotency-Key"] for item in received]
    assert len(set(keys)) == 6
    for incident in ("inc-a", "inc-b"):
        kinds = [item.json()["kind"] for item in received if item.json()["incident_id"] == incident]
        assert kinds == ["incident_opened", "incident_escalated", "incident_resolved"]
    check = documented_verifier()
    assert all(check(SECRET.encode(), item.headers, item.body) for item in received)
    assert all(item.path == f"/{URL_SECRET}" for item in received)
    states = {d["status"] for a in _alerts(live) for d in a["deliveries"]}
    assert states == {"delivered"}
    log_text = live.log.read_text(errors="replace")
    assert "alert delivery failed" in log_text  # the failures were logged...
    for secret in (SECRET, URL_SECRET, str(receiver.port)):
        assert secret not in log_text  # ...without the sink's URL or key


@pytest.mark.slow
def test_dead_letters_are_listed_and_retried_by_hand_through_the_cli(
    tmp_path: Any, start_aggregator: StartAggregator, receivers: list[Receiver]
) -> None:
    receiver = Receiver(status=503).start()
    receivers.append(receiver)
    pager = Receiver().start()
    receivers.append(pager)
    pd_sink = {
        "name": "pd",
        "type": "pagerduty",
        "url": f"{pager.url}/v2/enqueue",
        "routing_key": "R0UT1NG-KEY",
    }
    live = start_aggregator(
        database_url=f"sqlite:///{tmp_path / 'a.db'}",
        alert_poll_s=0.05,
        alert_sinks=[_sink(receiver, max_attempts=2), pd_sink],
    )
    _post(live.url, report("node-a", 1, "unhealthy", incident="inc-a"))
    wait_until(lambda: bool(_alerts(live, failed="true")), interval=POLL_S, message="a failed alert")
    assert len(receiver.received) == 2

    cli = [GPUHEALTH, "alerts", "--url", live.url, "--token", TOKEN]
    listed = subprocess.run(
        [*cli, "--failed", "--json"], capture_output=True, text=True, timeout=30, check=True
    )
    [alert] = json.loads(listed.stdout)
    dead = next(d for d in alert["deliveries"] if d["status"] == "dead")
    assert (dead["sink"], dead["attempts"], dead["last_error"]) == ("hook", 2, "HTTP 503")
    table = subprocess.run([*cli, "--failed"], capture_output=True, text=True, timeout=30, check=True)
    assert "hook: dead" in table.stdout

    receiver.status = 200
    subprocess.run([*cli, "--retry", str(dead["id"])], capture_output=True, text=True, timeout=30, check=True)
    wait_until(lambda: not _alerts(live, failed="true"), interval=POLL_S, message="no failed alert")
    assert len(receiver.received) == 3
    [event] = pager.bodies()
    assert (event["event_action"], event["dedup_key"]) == ("trigger", "inc-a")
    assert "R0UT1NG-KEY" not in live.log.read_text(errors="replace")


@pytest.mark.slow
def test_a_slow_receiver_does_not_slow_report_ingest(
    tmp_path: Any, start_aggregator: StartAggregator, receivers: list[Receiver]
) -> None:
    # The receiver holds each request 8 s: long enough that the 19 reports below are all taken before the
    # first delivery ends, even on a machine busy with other work.
    receiver = Receiver(delay_s=8).start()
    receivers.append(receiver)
    live = start_aggregator(
        database_url=f"sqlite:///{tmp_path / 'a.db'}",
        alert_poll_s=0.05,
        alert_sinks=[_sink(receiver, timeout_s=15)],
    )
    _post(live.url, report("node-0", 1, "unhealthy", incident="inc-0"))
    wait_until(
        lambda: any(d["attempts"] == 0 for a in _alerts(live) for d in a["deliveries"]),
        interval=POLL_S,
        message="a delivery not yet attempted",
    )
    time.sleep(0.2)  # the worker is now inside the 3 s request
    latencies = [
        _post(live.url, report(f"node-{n}", 1, "unhealthy", incident=f"inc-{n}")) for n in range(1, 20)
    ]
    assert max(latencies) < 1.0, latencies
    assert len(receiver.received) == 0  # the first delivery is still in flight
    receiver.wait_for(2, timeout_s=40)
