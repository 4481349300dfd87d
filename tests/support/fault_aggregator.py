"""``python fault_aggregator.py CONFIG CLOCK_FILE``: the aggregator as ``python -m aggregator`` serves it,
with its clock seam (``create_app``'s ``now``) on a :class:`stepped_clock.SteppedClock`, for the clock-step
faults. Everything else (settings, database, remediator, alert worker) is the product's own."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import uvicorn

from aggregator.app import create_app
from aggregator.server import listen_socket, serving_options
from aggregator.settings import load_settings
from core.logging import configure_logging

sys.path.insert(0, str(Path(__file__).parent))
from stepped_clock import SteppedClock


def _end_with_parent() -> None:
    """The test run died without stopping this process: end it too (no orphan left serving)."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def main(config: str, clock_file: str) -> int:
    threading.Thread(target=_end_with_parent, daemon=True).start()
    configure_logging("info")
    settings = load_settings(config)
    options = serving_options(settings)
    listener = listen_socket(settings.host, settings.port)
    try:
        app = create_app(settings, now=SteppedClock(Path(clock_file)).now)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, **options))
        server.run(sockets=[listener])
    finally:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
