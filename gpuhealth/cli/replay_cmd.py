"""``gpuhealth export`` (the fleet's history as one file) and ``gpuhealth replay`` (that history through a
candidate policy, would-have beside did). See docs/turning-on-safely.md."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from gpuhealth.cli.common import load_yaml_mapping
from gpuhealth.cli.errors import CliError
from gpuhealth.cli.fleet_cmd import _client, _common_options, _console, _table

if TYPE_CHECKING:
    from gpuhealth.replay.engine import ReplayResult
    from gpuhealth.replay.history import History

EXPORT_PAGE = 1000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export`` and ``replay`` to the command tree."""
    common = _common_options()
    export = subparsers.add_parser(
        "export", parents=[common], help="write the fleet's history (nodes, findings, actions) to one file"
    )
    export.add_argument("--since", default="30d", help="how far back: 30d, 12h or an ISO time (default 30d)")
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    export.set_defaults(handler=run_export)
    replay = subparsers.add_parser(
        "replay",
        parents=[common],
        help="run recorded history through a candidate policy: what it would have done beside what was done",
    )
    replay.add_argument("--policy", required=True, metavar="FILE", help="the candidate configuration (YAML)")
    source = replay.add_mutually_exclusive_group()
    source.add_argument("--since", default=None, help="read history from the aggregator: 30d, 12h, ISO time")
    source.add_argument("--from", dest="source", metavar="EXPORT", help="a file written by gpuhealth export")
    replay.set_defaults(handler=run_replay)


def run_export(args: argparse.Namespace) -> int:
    """``gpuhealth export --since 30d``."""
    from gpuhealth.replay.history import write_history

    history = _fetch(args, args.since)
    text = write_history(history, Path(args.output) if args.output else None)
    if not args.output:
        sys.stdout.write(text)
    else:
        print(
            f"{len(history.events)} events of {len(history.nodes)} nodes written to {args.output}",
            file=sys.stderr,
        )
    return 0


def _fetch(args: argparse.Namespace, since: str) -> History:
    from aggregator.timespec import TimeSpecError, parse_since
    from gpuhealth.replay.history import History, HistoryNode

    now = datetime.now(UTC)
    try:
        start = parse_since(since, now)
    except TimeSpecError as exc:
        raise CliError(f"--since: {exc}", 2) from exc
    with _client(args) as client:
        nodes = client.nodes()
        events = client.events(since=since, limit=EXPORT_PAGE, all_pages=True)
    fleet = [
        HistoryNode(
            name=node.name,
            orchestrator=node.orchestrator,
            gpu_count=node.gpu_count,
            interval_s=node.interval_s,
            profile=node.profile,
        )
        for node in nodes
    ]
    return History(exported_at=now, since=start, until=now, nodes=fleet, events=events)


def run_replay(args: argparse.Namespace) -> int:
    """``gpuhealth replay --policy FILE [--since 30d | --from EXPORT] [--json]``."""
    from gpuhealth.replay.engine import Candidate, CandidateError, replay
    from gpuhealth.replay.history import HistoryError, read_history

    try:
        candidate = Candidate.from_mapping(load_yaml_mapping(args.policy), args.policy)
    except CandidateError as exc:
        raise CliError(str(exc), 2) from exc
    if args.source:
        try:
            history = read_history(Path(args.source))
        except HistoryError as exc:
            raise CliError(str(exc), 2) from exc
    else:
        history = _fetch(args, args.since or "30d")
    result = replay(history, candidate)
    if args.json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        print_replay(result)
    return 0


ROWS = ("taints", "cordons", "drains", "requeues", "resets", "reboots", "breaker_trips", "budget_refusals")


def print_replay(result: ReplayResult) -> None:
    """Totals would-have beside did, each node's incidents, the breaker trips, gaps and stale rows."""
    from gpuhealth.replay.engine import hours

    console = _console()
    console.print(
        f"[bold]replay[/] {result.since:%Y-%m-%d %H:%M} to {result.until:%Y-%m-%d %H:%M} UTC: "
        f"{len(result.nodes)} nodes, {result.incidents} incidents would have opened"
    )
    shadowed = result.shadow.as_dict() != type(result.shadow)().as_dict()
    totals = _table("", "WOULD HAVE", "DID", *(("SHADOW (recorded)",) if shadowed else ()))
    columns = [
        result.would.as_dict(),
        result.did.as_dict(),
        *((result.shadow.as_dict(),) if shadowed else ()),
    ]
    for name in (*ROWS, "gpu_hours"):
        if name == "gpu_hours":
            totals.add_row("GPU-hours out of service", *(hours(float(column[name])) for column in columns))
        else:
            totals.add_row(name.replace("_", " "), *(str(column[name]) for column in columns))
    console.print(totals)
    table = _table("NODE", "PROFILE", "INCIDENT", "WOULD HAVE", "DID")
    for node in result.nodes:
        did_steps = {line.started_at: line.steps for line in node.did_incidents}
        for line in node.would_incidents:
            table.add_row(
                escape(node.node),
                escape(node.profile),
                f"{line.started_at:%m-%d %H:%M:%S} {escape(', '.join(line.reasons))}",
                escape(", ".join(step.split(" ")[0] for step in line.steps) or "-"),
                escape(", ".join(step.split(" ")[0] for step in did_steps.get(line.started_at, [])) or "-"),
            )
    if table.row_count:
        console.print(table)
    for trip in result.breaker_trips:
        console.print(f"[red]breaker would have tripped[/] {escape(trip)}")
    if result.gaps:
        console.print(f"[yellow]{len(result.gaps)} gaps[/] (no exact replay there):")
        for gap in result.gaps:
            console.print(f"  {escape(gap)}")
    if result.stale:
        console.print(f"[magenta]{len(result.stale)} stale rows[/] (arrived late: shown, not acted on):")
        for stale in result.stale:
            console.print(f"  {escape(stale)}")
