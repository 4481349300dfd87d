"""``gpuhealth aggregator``: run the central aggregator service.

Settings come from the ``aggregator:`` section of the YAML file given with ``--config``, then from
``GPUHEALTH_AGGREGATOR_*`` environment variables (e.g. ``GPUHEALTH_AGGREGATOR_TOKEN``), then from the
flags below. With no database URL it keeps its state in ``gpuhealth-aggregator.db`` (SQLite, created on first
start).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpuhealth.cli.errors import CliError

if TYPE_CHECKING:
    from aggregator.settings import AggregatorSettings

EXIT_CONFIG = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``aggregator`` to the command tree."""
    parser = subparsers.add_parser(
        "aggregator",
        help="run the central aggregator (SQLite file by default, PostgreSQL by URL)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", metavar="FILE", help="YAML configuration (its 'aggregator' section is used)"
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8470)")
    parser.add_argument("--database-url", metavar="URL", help="sqlite:///FILE or postgresql+psycopg://...")
    parser.add_argument(
        "--migrate-only",
        action="store_true",
        help="bring the database schema to the newest version and exit (a deployment's upgrade step)",
    )
    parser.set_defaults(handler=run_aggregator)


def run_aggregator(args: argparse.Namespace) -> int:
    """Load the settings, open the store and serve until stopped."""
    from aggregator.server import serve
    from aggregator.settings import load_settings
    from aggregator.store.engine import StoreError
    from core.settings import SettingsError

    overrides: dict[str, Any] = {
        key: value
        for key, value in (("host", args.host), ("port", args.port), ("database_url", args.database_url))
        if value is not None
    }
    if args.migrate_only:  # serves nothing, so it needs no API token (a pre-install step has none yet)
        overrides["allow_anonymous"] = True
    try:
        settings = load_settings(args.config, **overrides)
        if args.migrate_only:
            _migrate_only(settings)
        else:
            serve(settings, announce=lambda line: print(line, flush=True))
    except (SettingsError, StoreError) as exc:
        raise CliError(str(exc), EXIT_CONFIG) from exc
    return 0


def _migrate_only(settings: AggregatorSettings) -> None:
    """Open the database, which applies every migration not yet applied (under a lock on PostgreSQL, so
    several at once are safe), and close it again."""
    from aggregator.store.engine import open_database

    open_database(settings).dispose()
