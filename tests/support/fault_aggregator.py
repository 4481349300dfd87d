"""``python fault_aggregator.py CONFIG CLOCK_FILE``: the aggregator as ``python -m aggregator`` serves it,
with its clock seam (``create_app``'s ``now``) on a :class:`stepped_clock.SteppedClock`, for the clock-step
faults. Everything else (settings, database, remediator, alert worker) is the product's own."""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn

from aggregator.app import create_app
from aggregator.server import listen_socket, serving_options
from aggregator.settings import load_settings
from core.logging import configure_logging

sys.path.insert(0, str(Path(__file__).parent))
from stepped_clock import SteppedClock


def main(config: str, clock_file: str) -> int:
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
