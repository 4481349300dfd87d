"""A real HTTP alert receiver on 127.0.0.1 for the alert tests: records every POST, can be down or slow."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from waiting import HANG_GUARD_S, wait_until

from tests.aggregator.postgres import free_port


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Listens on a fixed port once started; ``stop()`` closes the port (a receiver that is down)."""

    def __init__(self, *, delay_s: float = 0.0, status: int = 200) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.delay_s = delay_s
        self.status = status
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                time.sleep(receiver.delay_s)
                with receiver._lock:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def bodies(self) -> list[Any]:
        with self._lock:
            return [item.json() for item in self.received]

    def wait_for(self, count: int, timeout_s: float = HANG_GUARD_S) -> list[Received]:
        """The first ``count`` requests, once they arrived (hang guard ``timeout_s``)."""
        seen: list[Received] = []

        def arrived() -> bool:
            with self._lock:
                seen[:] = self.received
            return len(seen) >= count

        if not wait_until(arrived, timeout=timeout_s, interval=0.02):
            raise AssertionError(f"expected {count} deliveries, got {len(seen)}")
        return seen
