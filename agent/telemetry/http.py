"""The agent's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (alive) and ``/readyz`` (ready).

A small stoppable ``ThreadingHTTPServer`` rather than ``prometheus_client.start_http_server``: that one
serves the global registry's defaults and cannot be stopped, and tests and the demo run many agents in one
process, each with its own registry and port.

The port is open to the pod network, so a client that connects and never sends (or never reads) must not
cost a thread for ever: every connection has a socket timeout, and at most ``max_connections`` are served
at once — one more is closed at once (a scraper or a probe retries), so a flood holds a bounded number of
threads for a bounded time. A client that leaves before its answer is written is routine (a scrape that
timed out): one debug line, never a traceback on stderr.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger(__name__)

Probe = Callable[[], bool]

REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 16  # a scraper or two and the kubelet's probes; far more is a misbehaving client
REFUSED_WARNING_EVERY_S = 60.0  # a flood is one warning a minute (with the count), not one per connection
# The client went away (timed out, closed, reset) while we read or wrote: nothing is wrong on our side.
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class AgentHttpServer:
    """Serves one agent's registry and probes on ``host:port`` from a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        alive: Probe,
        ready: Probe,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        handler = _handler_class(registry, alive=alive, ready=ready, timeout_s=request_timeout_s)
        self._server = BoundedHttpServer((host, port), handler, max_connections=max_connections)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port actually bound (useful when 0 was asked for)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> AgentHttpServer:
        """Serve from a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="agent-http", daemon=True
        )
        self._thread.start()
        log.info("http_serving", port=self.port)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(2.0)
            self._thread = None
        self._server.server_close()


class BoundedHttpServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them; errors go to structlog."""

    daemon_threads = True
    # The standard library listens with a backlog of 5: a burst of connections beyond it waits a second for
    # the SYN to be retried, probes included. Accepting (and refusing, when full) is cheap.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, max_connections: int
    ) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max(1, max_connections))
        self._max_connections = max(1, max_connections)
        self._refused_lock = threading.Lock()
        self._refused_since_warning = 0
        self._last_warning = float("-inf")

    def process_request(self, request: Any, client_address: Any) -> None:
        # Runs on the accepting thread: never wait here, or one slow client would stall every other.
        if not self._slots.acquire(blocking=False):
            self._refuse(client_address)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, client_address: Any) -> None:
        now = time.monotonic()
        with self._refused_lock:
            self._refused_since_warning += 1
            due = now - self._last_warning >= REFUSED_WARNING_EVERY_S
            if due:
                refused, self._refused_since_warning, self._last_warning = self._refused_since_warning, 0, now
        if due:
            log.warning(
                "http_connections_refused",
                refused=refused,
                max_connections=self._max_connections,
                client=_client(client_address),
            )
        else:
            log.debug("http_connection_refused", client=_client(client_address))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback to stderr here; one structured line instead."""
        error = sys.exc_info()[1]
        text = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
        if isinstance(error, _CLIENT_GONE):
            log.debug("http_client_gone", client=_client(client_address), error=text)
        else:
            log.warning("http_request_failed", client=_client(client_address), error=" ".join(text.split()))


def _client(client_address: Any) -> str:
    if isinstance(client_address, tuple) and len(client_address) >= 2:
        return f"{client_address[0]}:{client_address[1]}"
    return str(client_address)


def _handler_class(
    registry: CollectorRegistry, *, alive: Probe, ready: Probe, timeout_s: float
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # StreamRequestHandler applies it to the connection: a read or write that waits longer raises.
        timeout = timeout_s

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(HTTPStatus.OK, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._probe(alive)
            elif path == "/readyz":
                self._probe(ready)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

        def _probe(self, probe: Probe) -> None:
            ok = probe()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, b"ok\n" if ok else b"not ok\n", "text/plain; charset=utf-8")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
            log.debug("http_request", line=format % args)

    return Handler
