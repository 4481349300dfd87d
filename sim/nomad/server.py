"""The emulated Nomad API served by uvicorn on 127.0.0.1 from a background thread (see sim.http_server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.http_server import ThreadedHttpServer


class HttpServer(ThreadedHttpServer):
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
        super().__init__(
            app,
            host,
            port,
            thread_name=thread_name,
            api_name="Nomad API",
            on_start=on_start,
            on_stop=on_stop,
        )
