"""``gpuhealth incidents [--open] [--since 1d] [--node NODE]``: the incidents, newest first, each with the
GPUs it is about; and the open incidents that ``gpuhealth status`` lists under the fleet's summary."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.text import Text

from gpuhealth.cli.errors import CliError
from gpuhealth.cli.fleet_cmd import _client, _common_options, _console, _print_json, _table, _when
from gpuhealth.cli.guard import node_name

if TYPE_CHECKING:
    from rich.console import Console

    from agent.uplink.client import AggregatorClient
    from core.aggregator_api import Event, IncidentGpu, IncidentSummary

STATUS_DETAIL_LIMIT = 20
"""Open incidents ``gpuhealth status`` shows with what was done (one request each); the rest are counted."""


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


def gpu_text(gpu: IncidentGpu) -> str:
    """One GPU the way a person finds it: index, model, serial, PCI address and UUID (what is known)."""
    parts = [f"GPU {gpu.index}" if gpu.index is not None else "GPU"]
    parts += [part for part in (gpu.name, f"SN {gpu.serial}" if gpu.serial else None) if part]
    parts += [part for part in (gpu.pci_bus_id, gpu.uuid) if part]
    return " ".join(parts)


def gpus_text(gpus: list[IncidentGpu]) -> str:
    """The incident's GPUs, one line each; ``node`` when its findings are about the node as a whole."""
    return "\n".join(gpu_text(gpu) for gpu in gpus) or "node"


def done_so_far(timeline: list[Event]) -> str:
    """What was done for an incident, in order, each step once: "taint, drain, reboot"."""
    steps: list[str] = []
    for event in timeline:
        if event.kind != "action" or event.details.get("result") not in {"ok", "dry_run"}:
            continue
        step = str(event.details.get("action") or "")
        if step and step not in steps:
            steps.append(step)
    return ", ".join(steps) or "nothing yet"


def open_incidents(client: AggregatorClient) -> tuple[list[IncidentSummary], dict[str, str]]:
    """The open incidents, oldest first, and what was done for the first ``STATUS_DETAIL_LIMIT``."""
    found = sorted(client.incidents(open_only=True), key=lambda incident: incident.started_at)
    done = {
        incident.id: done_so_far(client.incident(incident.id).timeline)
        for incident in found[:STATUS_DETAIL_LIMIT]
    }
    return found, done


def print_open_incidents(
    found: list[IncidentSummary], done: dict[str, str], now: datetime, console: Console | None = None
) -> None:
    """The open incidents under the fleet summary: node, since, GPU, reason, action, done so far."""
    console = console or _console()
    if not found:
        return
    console.print(f"[bold red]open incidents ({len(found)}):[/]")
    table = _table("NODE", "SINCE", "GPU", "REASON", "ACTION", "DONE SO FAR")
    for incident in found[:STATUS_DETAIL_LIMIT]:
        table.add_row(
            Text(incident.node),
            _when(incident.started_at, now),
            Text(gpus_text(incident.gpus)),
            Text(", ".join(incident.reasons) or "-"),
            incident.action.value,
            Text(done.get(incident.id, "-")),
        )
    console.print(table)
    if len(found) > STATUS_DETAIL_LIMIT:
        console.print(
            f"{STATUS_DETAIL_LIMIT} of {len(found)} open incidents shown (the oldest); "
            "gpuhealth incidents --open for all"
        )
