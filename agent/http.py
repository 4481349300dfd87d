"""The agent's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (alive) and ``/readyz`` (ready).

A small stoppable ``ThreadingHTTPServer`` rather than ``prometheus_client.start_http_server``: that one
serves the global registry's defaults and cannot be stopped, and tests and the demo run many agents in one
process, each with its own registry and port.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger(__name__)

Probe = Callable[[], bool]


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
    ) -> None:
        handler = _handler_class(registry, alive=alive, ready=ready)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
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


def _handler_class(
    registry: CollectorRegistry, *, alive: Probe, ready: Probe
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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
