"""``gpuhealth incidents [--open] [--since 1d] [--node NODE]``: the incidents, newest first, each with the
GPUs it is about."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from rich.text import Text

from gpuhealth.cli.errors import CliError
from gpuhealth.cli.fleet_cmd import _client, _common_options, _console, _print_json, _table, _when
from gpuhealth.cli.guard import node_name
from gpuhealth.cli.incident_views import gpus_text
from gpuhealth.cli.safe_text import terminal_safe_model


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``incidents`` to the command tree."""
    incidents = subparsers.add_parser(
        "incidents", parents=[_common_options()], help="incidents, newest first, with their GPUs"
    )
    incidents.add_argument("--open", action="store_true", help="only the open ones")
    incidents.add_argument(
        "--since", help="those open or ended since: 30m, 1h, 2d or an ISO time (default: all kept)"
    )
    incidents.add_argument("--node", type=node_name, help="only this node's")
    incidents.set_defaults(handler=run_incidents)


def run_incidents(args: argparse.Namespace) -> int:
    """``gpuhealth incidents``."""
    from aggregator.timespec import TimeSpecError, parse_since

    now = datetime.now(UTC)
    if args.since is not None:
        try:
            parse_since(args.since, now)
        except TimeSpecError as exc:
            raise CliError(f"--since: {exc}", 2) from exc
    with _client(args) as client:
        found = client.incidents(node=args.node, open_only=args.open, since=args.since)
    if args.json:
        _print_json(found)
        return 0
    found = terminal_safe_model(found)  # reasons, GPU names and serials come from the agents
    console = _console()
    if not found:
        console.print("no open incidents" if args.open else "no incidents")
        return 0
    table = _table("ID", "NODE", "STARTED", "ENDED", "GPU", "REASONS", "ACTION")
    for incident in found:
        table.add_row(
            Text(incident.id),
            Text(incident.node),
            _when(incident.started_at, now),
            "open" if incident.open else _when(incident.ended_at, now),
            Text(gpus_text(incident.gpus)),
            Text(", ".join(incident.reasons) or "-"),
            incident.action.value,
        )
    console.print(table)
    return 0
