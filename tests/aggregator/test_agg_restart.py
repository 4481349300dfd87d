"""An aggregator killed with SIGKILL mid-stream and restarted loses no accepted report and counts none
twice: the agent retries every unacknowledged report with the same sequence number."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from waiting import SLOW_HANG_GUARD_S, wait_until

from tests.aggregator.builders import AUTH, report
from tests.aggregator.conftest import StartAggregator

NODES = 4
PER_NODE = 60


class Sender(threading.Thread):
    """An agent fleet in one thread: each report is retried until acknowledged, as the real client does."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.acked = 0
        self.failed_attempts = 0
        self.first_acks: dict[tuple[str, int], bool] = {}

    def run(self) -> None:
        with httpx.Client(headers=AUTH, timeout=2) as client:
            for seq in range(1, PER_NODE + 1):
                for number in range(NODES):
                    self._deliver(client, f"node-{number}", seq)

    def _deliver(self, client: httpx.Client, node: str, seq: int) -> None:
        deadline = (
            time.monotonic() + SLOW_HANG_GUARD_S
        )  # the aggregator is killed and started again meanwhile
        while time.monotonic() < deadline:
            try:
                response = client.post(f"{self.url}/v1/reports", json=report(node, seq, gpus=1))
            except httpx.TransportError:
                self.failed_attempts += 1
                time.sleep(0.05)
                continue
            assert response.status_code == 200, response.text
            self.first_acks[(node, seq)] = response.json()["accepted"]
            self.acked += 1
            return
        raise AssertionError(f"report {node}/{seq} never acknowledged")


@pytest.mark.slow
def test_sigkill_and_restart_mid_stream_loses_and_doubles_nothing(
    database_url: str, start_aggregator: StartAggregator
) -> None:
    live = start_aggregator(database_url=database_url)
    sender = Sender(live.url)
    sender.start()
    wait_until(lambda: sender.acked >= NODES * PER_NODE // 3, timeout=SLOW_HANG_GUARD_S)
    live.kill()
    live.restart()
    sender.join(timeout=SLOW_HANG_GUARD_S)

    assert not sender.is_alive()
    assert sender.failed_attempts > 0, "the kill did not interrupt the stream"
    assert len(sender.first_acks) == NODES * PER_NODE
    nodes = httpx.get(f"{live.url}/v1/nodes", headers=AUTH).json()
    assert [(n["name"], n["last_seq"], n["reports_accepted"]) for n in nodes] == [
        (f"node-{number}", PER_NODE, PER_NODE) for number in range(NODES)
    ]
