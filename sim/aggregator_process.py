"""The real aggregator app served by uvicorn on a thread of this process, on 127.0.0.1.

Used by ``gpuhealth demo`` and by the scenario tests: ``stop()`` then ``start()`` keeps the port and the
database, so a scenario can take the aggregator away and bring it back.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import uvicorn

from agent.uplink.client import AggregatorClient
from aggregator.app import create_app
from aggregator.remediator import DrainFactory
from aggregator.server import serving_options
from aggregator.settings import load_settings
from core.clock import utc_now
from sim.http_server import wait_until_started

START_TIMEOUT_S = 10.0


class AggregatorStartError(RuntimeError):
    """The aggregator's HTTP server did not come up in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class AggregatorServer:
    """One aggregator (SQLite file ``database``) on a background thread; ``now`` is its clock."""

    def __init__(
        self,
        database: Path,
        token: str | None,
        *,
        now: Callable[[], datetime] | None = None,
        drain_for: DrainFactory | None = None,
        **settings: object,
    ) -> None:
        self.port = free_port()
        # With tls_cert_file and tls_key_file among the settings it serves HTTPS (the certificate must name
        # 127.0.0.1); the caller's clients then need the CA.
        scheme = "https" if settings.get("tls_cert_file") else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.token = token
        # ``token`` is the deprecated shared token; per-identity tokens come with ``token_file=...``.
        self._settings: dict[str, Any] = {"database_url": f"sqlite:///{database}", "token": token, **settings}
        self._now = now
        self._drain_for = drain_for  # the central remediator's drains (on the emulator), or none
        self._server: uvicorn.Server | None = None
        self.app: Any = None  # the FastAPI app being served (its state holds the remediator)
        self._thread: threading.Thread | None = None

    @property
    def drains_centrally(self) -> bool:
        """Whether its remediator drains the nodes (the agents then use ``drain_by: aggregator``)."""
        return self._drain_for is not None

    def start(self) -> AggregatorServer:
        """Serve until :meth:`stop`; returns once the port accepts connections."""
        settings = load_settings(environ={}, **self._settings)
        app = create_app(settings, now=self._now or utc_now, drain_for=self._drain_for)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            **serving_options(settings),
        )
        self.app = app
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gpuhealth-aggregator", daemon=True)
        self._thread.start()
        if not wait_until_started(self._server, self._thread, START_TIMEOUT_S):
            raise AggregatorStartError(f"the aggregator did not start on port {self.port}")
        return self

    def stop(self) -> None:
        """Stop serving (the port closes; the database stays)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(START_TIMEOUT_S)
        self._server = None

    def client(self, token: str | None = None) -> AggregatorClient:
        """A client of this aggregator with ``token`` (default: the shared one)."""
        return AggregatorClient(self.url, token or self.token, timeout_s=5.0, retries=1)
