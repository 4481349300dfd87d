"""``gpuhealth events --audit`` (who did what, from where) and ``gpuhealth forget NODE`` (admin).

The audit log lists every mutating call the aggregator accepted, with the authenticated caller, its role,
how it authenticated and the client address; reading it needs the operator role.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.text import Text

from gpuhealth.cli.fleet_cmd import _client, _common_options, _console, _print_json, _table, _when
from gpuhealth.cli.guard import confirm, node_name
from gpuhealth.cli.safe_text import terminal_safe_model

if TYPE_CHECKING:
    from agent.uplink.client import AggregatorClient
    from core.aggregator_api import AuditEntry


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``forget``, and ``--audit`` to ``events`` (registered before, by fleet_cmd)."""
    events = subparsers.choices["events"]
    events.add_argument(
        "--audit", action="store_true", help="the audit log instead: who did what, from where (operator)"
    )
    plain_events = events.get_default("handler")
    events.set_defaults(handler=lambda args: run_audit(args) if args.audit else plain_events(args))
    forget = subparsers.add_parser(
        "forget",
        parents=[_common_options()],
        help="forget a node (admin): it leaves the fleet, the budget and the breaker; its history stays",
    )
    forget.add_argument("name", metavar="NODE", type=node_name)
    forget.add_argument(
        "--yes", action="store_true", help="do not ask, even while its agent reports or it is draining"
    )
    forget.set_defaults(handler=run_forget)


def run_audit(args: argparse.Namespace) -> int:
    """``gpuhealth events --audit [--since 1h]``."""
    with _client(args) as client:
        entries = client.audit(since=args.since, limit=args.limit)
    if args.json:
        _print_json(entries)
    else:
        print_audit(terminal_safe_model(entries), datetime.now(UTC))
    return 0


def run_forget(args: argparse.Namespace) -> int:
    """``gpuhealth forget NODE``."""
    with _client(args) as client:
        if not args.yes:
            warning = _forget_warning(client, args.name)
            if warning:
                confirm(warning, yes=False)
        removed = client.forget_node(args.name)
    if args.json:
        _print_json(removed)
    else:
        sys.stdout.write(
            f"node {removed.node} forgotten ({removed.incidents} incidents, {removed.permits} permits, "
            f"{removed.requests} requests removed; its history stays)\n"
        )
    return 0


def _forget_warning(client: AggregatorClient, name: str) -> str | None:
    """Why forgetting the node now would be a mistake: its agent still reports, or it is being drained."""
    from agent.uplink.client import NotFound
    from core.aggregator_api import OPEN_DRAIN_PHASES, STALE

    try:
        detail = client.node(name)
    except NotFound:
        return None  # the aggregator answers for an unknown node itself
    reasons = []
    if detail.state != STALE:
        reasons.append(
            f"its agent still reports (last {detail.last_report_at:%Y-%m-%d %H:%M:%S}Z) and will "
            "add it back with its next report"
        )
    try:
        drain = client.latest_drain(name)
    except NotFound:
        drain = None
    if drain is not None and drain.phase in OPEN_DRAIN_PHASES:
        reasons.append(f"it is mid-drain (permit {drain.permit_id}, {drain.phase})")
    if not reasons:
        return None
    return f"forgetting {name} removes its incidents, permits and requests, but " + "; and ".join(reasons)


def print_audit(entries: list[AuditEntry], now: datetime) -> None:
    """One row per mutating call, oldest first."""
    console = _console()
    if not entries:
        console.print("no audited calls")
        return
    table = _table("WHEN", "WHO", "ROLE", "ACTION", "TARGET", "FROM")
    for entry in entries:
        table.add_row(
            _when(entry.at, now),
            Text(entry.actor),
            entry.role,
            entry.action,
            Text(entry.target or "-"),
            Text(entry.client),
        )
    console.print(table)
