"""Serves an ASGI app under uvicorn on 127.0.0.1 from a background thread, restartable on the same port."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

import uvicorn


class HttpServer:
    """One uvicorn listener; ``stop`` then ``start`` comes back on the same port (outages)."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        thread_name: str = "nomad-sim-http",
        on_start: Callable[[], None] | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        """``on_start`` runs before serving, ``on_stop`` before shutting down (to end long polls)."""
        self.app = app
        self._on_start = on_start
        self._on_stop = on_stop
        self.host = host
        self.port = port
        self._thread_name = thread_name
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Bind (a free port the first time, the same one afterwards) and serve until :meth:`stop`."""
        with self._lock:
            if self._server is not None:
                return
            if self._on_start is not None:
                self._on_start()
            # IPPROTO_TCP explicitly: asyncio turns Nagle's algorithm off only for sockets that say TCP.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            self.port = sock.getsockname()[1]
            config = uvicorn.Config(
                self.app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                http="h11",
                loop="asyncio",
                timeout_graceful_shutdown=1,
                timeout_keep_alive=30,
            )
            server = uvicorn.Server(config)
            thread = threading.Thread(
                target=server.run, kwargs={"sockets": [sock]}, name=self._thread_name, daemon=True
            )
            thread.start()
            self._server, self._thread = server, thread
        waiter = threading.Event()
        waited = 0.0
        while not server.started and thread.is_alive() and waited < timeout_s:
            waiter.wait(0.01)
            waited += 0.01
        if not server.started:
            raise RuntimeError(f"the emulated Nomad API did not start on {self.url}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the listener (open blocking queries are cut) and wait for the thread."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        if server is None or thread is None:
            return
        if self._on_stop is not None:
            self._on_stop()
        server.should_exit = True
        thread.join(timeout_s)
        if thread.is_alive():
            server.force_exit = True
            with contextlib.suppress(RuntimeError):
                thread.join(timeout_s)
