"""The agent's HTTP endpoint under misbehaving clients: idle connections time out, concurrent ones are
bounded, and a client that goes away mid-answer is one structured log line, never a traceback."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from structlog.testing import capture_logs
from waiting import HANG_GUARD_S, wait_until

from agent.telemetry.http import AgentHttpServer


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """structlog as configured by default: a test elsewhere in this process may have configured a level
    that drops the debug lines these tests look for (capture_logs replaces processors, not the filter)."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def connection_threads() -> list[threading.Thread]:
    """The threads serving one connection each (socketserver names them after process_request_thread)."""
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


@pytest.fixture
def server() -> Iterator[AgentHttpServer]:
    running = AgentHttpServer(
        CollectorRegistry(),
        alive=lambda: True,
        ready=lambda: True,
        request_timeout_s=0.5,
        max_connections=8,
    ).start()
    yield running
    running.stop()


def test_many_half_open_connections_hold_a_bounded_number_of_threads_for_a_bounded_time(
    server: AgentHttpServer,
) -> None:
    """60 clients connect and send nothing: at most `max_connections` threads serve them, each gives up
    after the socket timeout, and the endpoint answers again afterwards."""
    before = len(connection_threads())
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(60)]
    try:
        time.sleep(0.2)  # let the server accept what it will
        assert len(connection_threads()) - before <= 8
        assert wait_until(lambda: len(connection_threads()) <= before), "idle connections never timed out"
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    finally:
        for sock in idle:
            sock.close()


class BlocksUntil(Collector):
    """A collector that holds /metrics until the test says go (so the client can leave first)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.entered.set()
        self.go.wait(HANG_GUARD_S)
        # large enough that writing it to a reset connection fails
        family = GaugeMetricFamily("padding", "x" * 100, labels=["n"])
        for n in range(5000):
            family.add_metric([str(n)], n)
        yield family


@pytest.fixture
def debug_logging() -> Iterator[None]:
    """structlog's defaults (every level) for the test, whatever an earlier test's ``main()`` configured:
    a logger filtered at warning drops the debug line before ``capture_logs`` sees it."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("debug_logging")
def test_a_client_gone_before_the_answer_is_one_debug_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry = CollectorRegistry()
    blocker = BlocksUntil()
    registry.register(blocker)
    running = AgentHttpServer(registry, alive=lambda: True, ready=lambda: True).start()
    try:
        with capture_logs() as logs:
            client = socket.create_connection(("127.0.0.1", running.port))
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert blocker.entered.wait(HANG_GUARD_S)
            # close with a reset (linger 0), as a scraper that timed out does
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            blocker.go.set()
            assert wait_until(lambda: any(e["event"] == "http_client_gone" for e in logs)), logs
    finally:
        running.stop()
    gone = [e for e in logs if e["event"] == "http_client_gone"]
    assert gone and gone[0]["log_level"] == "debug" and "error" in gone[0]
    assert "Traceback" not in capsys.readouterr().err


def test_the_demos_alert_receiver_answers_a_bad_request_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The receiver runs on the same bounded server: a request it cannot read is one warning line, and
    the next alert is still received (the demo's live view is not broken by a traceback)."""
    from sim.scenario.receiver import AlertReceiver

    receiver = AlertReceiver().start()
    try:
        with capture_logs() as logs:
            bad = socket.create_connection(("127.0.0.1", int(receiver.url.split(":")[2].split("/")[0])))
            bad.sendall(b"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n")
            bad.recv(1024)
            bad.close()
            assert wait_until(lambda: any(e["event"] == "http_request_failed" for e in logs)), logs
        answer = httpx.post(receiver.url, json={"kind": "incident_opened", "node": "n1"}, timeout=5)
        assert answer.status_code == 200
        assert receiver.count("incident_opened") == 1
    finally:
        receiver.stop()
    assert "Traceback" not in capsys.readouterr().err
