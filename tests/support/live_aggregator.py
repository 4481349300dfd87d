"""The real aggregator app under uvicorn on a thread, sharing a test's clock; stop() / start() keep the port
and the database, so a test can take the aggregator away and bring it back."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from aggregator.app import create_app
from aggregator.settings import load_settings
from remediation.aggregator_client import AggregatorClient
from sim.clock import ManualClock

HANG_GUARD_S = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LiveAggregator:
    def __init__(self, database: Path, clock: ManualClock, token: str, **settings: object) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        self._settings: dict[str, Any] = {"database_url": f"sqlite:///{database}", "token": token, **settings}
        self._clock = clock
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LiveAggregator:
        app = create_app(load_settings(environ={}, **self._settings), now=self._clock.now)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + HANG_GUARD_S
        while not self._server.started:
            assert time.monotonic() < deadline, "the aggregator did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(HANG_GUARD_S)
        self._server = None

    def client(self) -> AggregatorClient:
        return AggregatorClient(self.url, self.token, timeout_s=5.0, retries=1)
