"""The delaying relay (delay_relay.py), the suite's stand-in for ``tc netem delay``: what it forwards arrives
whole and in order, each way after the delay its control file names, which can change while a connection
lives; the end of a stream is passed on."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_aggregator import free_port

RELAY = Path(__file__).with_name("delay_relay.py")


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback echo server; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    server.close()


@pytest.fixture
def relay(echo: int, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The relay on a free loopback port to the echo server; yields its port and its control file."""
    port, control = free_port(), tmp_path / "delay"
    argv = [sys.executable, str(RELAY), "127.0.0.1", str(port), "127.0.0.1", str(echo), str(control)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    yield port, control
    process.kill()
    process.wait()


def round_trip(conn: socket.socket, payload: bytes) -> tuple[bytes, float]:
    started = time.monotonic()
    conn.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = conn.recv(65536)
        assert chunk, "the relay closed the connection early"
        got += chunk
    return got, time.monotonic() - started


def test_the_delay_is_applied_each_way_and_follows_the_control_file(relay: tuple[int, Path]) -> None:
    port, control = relay
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        got, quick = round_trip(conn, b"ping")
        assert got == b"ping"
        assert quick < 0.2, f"{quick:.3f} s without a delay"

        control.write_text("300", encoding="utf-8")
        time.sleep(0.1)  # the relay reads its control file every 20 ms
        payload = bytes(range(256)) * 800  # 200 kB: many chunks, kept in order
        got, slow = round_trip(conn, payload)
        assert got == payload
        assert 0.6 <= slow < 2.0, f"{slow:.3f} s with 300 ms each way"

        control.write_text("0", encoding="utf-8")
        time.sleep(0.1)
        got, healed = round_trip(conn, b"pong")
        assert got == b"pong"
        assert healed < 0.2, f"{healed:.3f} s once the delay is off"


def test_the_end_of_a_stream_is_passed_on(relay: tuple[int, Path]) -> None:
    port, _control = relay
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"last words")
        conn.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
        assert got == b"last words"  # and recv returned b"": the echo server's close came through
