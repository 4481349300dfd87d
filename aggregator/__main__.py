"""``python -m aggregator [--config FILE]``: the service without the rest of the command line."""

from __future__ import annotations

import argparse
import sys

from aggregator.server import serve
from aggregator.settings import load_settings
from aggregator.store.engine import StoreError
from core.logging import configure_logging
from core.settings import SettingsError


def main() -> int:
    """Parse the flags, load the settings and serve; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m aggregator", description=__doc__)
    parser.add_argument("--config", metavar="FILE", help="YAML file; its 'aggregator' section is used")
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error (default info)")
    args = parser.parse_args()
    configure_logging(args.log_level)
    try:
        serve(load_settings(args.config))
    except (SettingsError, StoreError) as exc:
        print(f"aggregator: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
