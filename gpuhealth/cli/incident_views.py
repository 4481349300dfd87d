"""How incidents read on a terminal: the GPUs they are about, what was done, the open ones under
``gpuhealth status``. Shared by ``status``, ``node`` and ``incidents``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console

    from agent.uplink.client import AggregatorClient
    from core.aggregator_api import Event, IncidentGpu, IncidentSummary

STATUS_DETAIL_LIMIT = 20
"""Open incidents ``gpuhealth status`` shows with what was done (one request each); the rest are counted."""


_ZONE = {"local": False}


def show_local_time(local: bool) -> None:
    """Show times in this machine's zone (``--local-time``) rather than in UTC, in every view at once."""
    _ZONE["local"] = local


def clock(moment: datetime) -> str:
    """A time to the second, in one zone for every view: ``12-04 18:24:43Z`` (UTC, the default) or
    ``12-04 19:24:43 CET`` (local, on request)."""
    if _ZONE["local"]:
        shown = moment.astimezone()
        return f"{shown:%m-%d %H:%M:%S} {shown.tzname() or ''}".rstrip()
    return f"{moment.astimezone(UTC):%m-%d %H:%M:%S}Z"


def when(moment: datetime | None, now: datetime) -> str:
    """``3m ago (12-04 18:24:43Z)``: relative, then the time to the second (:func:`clock`)."""
    from aggregator.timespec import relative

    if moment is None:
        return "-"
    return f"{relative(moment, now)} ({clock(moment)})"


def table(*columns: str) -> Table:
    """A borderless table whose columns fold rather than cut."""
    made = Table(show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        made.add_column(column, overflow="fold")
    return made


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
    if console is None:
        from rich.console import Console

        console = Console(highlight=False)
    if not found:
        return
    console.print(f"[bold red]open incidents ({len(found)}):[/]")
    rows = table("NODE", "SINCE", "GPU", "REASON", "ACTION", "DONE SO FAR")
    for incident in found[:STATUS_DETAIL_LIMIT]:
        rows.add_row(
            Text(incident.node),
            when(incident.started_at, now),
            Text(gpus_text(incident.gpus)),
            Text(", ".join(incident.reasons) or "-"),
            incident.action.value,
            Text(done.get(incident.id, "-")),
        )
    console.print(rows)
    if len(found) > STATUS_DETAIL_LIMIT:
        console.print(
            f"{STATUS_DETAIL_LIMIT} of {len(found)} open incidents shown (the oldest); "
            "gpuhealth incidents --open for all"
        )
