"""An ASGI app served by uvicorn on 127.0.0.1 from a background thread, restartable on the same port.

The emulators (Nomad, Kubernetes) and the in-process aggregator all need the same thing: a real listener
the code under test reaches over HTTP, which a scenario can take away and bring back without the port
changing under the clients.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on ``host:port`` (``port`` 0: a free one), reusable right after a stop."""
    # IPPROTO_TCP explicitly: asyncio disables Nagle's algorithm only on sockets that say TCP, and without
    # that every response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def wait_until_started(server: uvicorn.Server, thread: threading.Thread, timeout_s: float) -> bool:
    """Whether ``server`` came up within ``timeout_s`` (gives up early when its thread died)."""
    deadline = time.monotonic() + timeout_s
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(server.started)


def shut_down(server: uvicorn.Server, thread: threading.Thread, timeout_s: float) -> None:
    """Ask ``server`` to stop and wait for its thread; force it when a graceful stop overruns."""
    server.should_exit = True
    thread.join(timeout_s)
    if thread.is_alive():
        server.force_exit = True
        with contextlib.suppress(RuntimeError):
            thread.join(timeout_s)


class ThreadedHttpServer:
    """One uvicorn listener; ``stop`` then ``start`` comes back on the same port (outages)."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        thread_name: str,
        api_name: str,
        on_start: Callable[[], None] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        """``on_start`` runs once the port is bound, before serving; ``on_stop`` before shutting down."""
        self.app = app
        self.host = host
        self.port = port
        self._thread_name = thread_name
        self._api_name = api_name
        self._on_start = on_start
        self._on_stop = on_stop
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the listener is accepting connections."""
        return self._server is not None

    def start(self, timeout_s: float = 10.0) -> None:
        """Bind (a free port the first time, the same one afterwards) and serve until :meth:`stop`."""
        with self._lock:
            if self._server is not None:
                return
            sock = bind_tcp(self.host, self.port)
            self.port = sock.getsockname()[1]
            if self._on_start is not None:
                self._on_start()
            server = uvicorn.Server(self._config())
            thread = threading.Thread(
                target=server.run, kwargs={"sockets": [sock]}, name=self._thread_name, daemon=True
            )
            thread.start()
            self._server, self._thread = server, thread
        if not wait_until_started(server, thread, timeout_s):
            raise RuntimeError(f"the emulated {self._api_name} did not start on {self.url}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the listener (open long polls are cut by ``on_stop``) and wait for the thread."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        if server is None or thread is None:
            return
        if self._on_stop is not None:
            self._on_stop()
        shut_down(server, thread, timeout_s)

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            http="httptools",
            loop="asyncio",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=30,
        )
