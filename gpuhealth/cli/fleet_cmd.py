"""On-call commands that ask the aggregator: ``status``, ``node``, ``events``, ``quarantine``, ``release``,
``breaker``, ``alerts`` and ``silence``.

The aggregator's URL and token come from ``--url`` / ``--token``, else ``GPUHEALTH_AGGREGATOR_URL`` /
``GPUHEALTH_TOKEN``, else the ``client:`` section (``aggregator_url``, ``token`` or ``token_file``) of the
YAML file named by ``--config`` or ``GPUHEALTH_CONFIG``. Every command takes ``--json``. An unreachable
aggregator or a refused token is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuhealth.cli.common import load_yaml_mapping
from gpuhealth.cli.errors import CliError
from gpuhealth.cli.guard import confirm, node_name
from gpuhealth.cli.render import status_text
from gpuhealth.cli.safe_text import terminal_safe_model

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

    from agent.uplink.client import AggregatorClient
    from core.aggregator_api import (
        BreakerStatus,
        Event,
        FleetSummary,
        IncidentSummary,
        NodeDetail,
        NodeRequest,
    )
    from core.alerts_api import AlertView, Silence

EXIT_FAILURE = 1
DEFAULT_URL = "http://127.0.0.1:8470"
URL_ENV = "GPUHEALTH_AGGREGATOR_URL"
TOKEN_ENV = "GPUHEALTH_TOKEN"  # noqa: S105 - the variable's name, not a secret
CONFIG_ENV = "GPUHEALTH_CONFIG"
CA_FILE_ENV = "GPUHEALTH_CA_FILE"
CLIENT_CERT_ENV = "GPUHEALTH_CLIENT_CERT"
CLIENT_KEY_ENV = "GPUHEALTH_CLIENT_KEY"

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the on-call commands to the command tree."""
    common = _common_options()
    status = subparsers.add_parser("status", parents=[common], help="fleet summary from the aggregator")
    status.set_defaults(handler=run_status)

    node = subparsers.add_parser(
        "node", parents=[common], help="one node: GPUs, incident, findings, timeline"
    )
    node.add_argument("name", metavar="NODE", type=node_name)
    node.set_defaults(handler=run_node)

    events = subparsers.add_parser("events", parents=[common], help="incident and action history")
    events.add_argument("--since", default="1h", help="how far back: 30m, 1h, 2d or an ISO time (default 1h)")
    events.add_argument("--node", type=node_name, help="only this node")
    events.add_argument("--limit", type=int, default=200, help="at most this many events (default 200)")
    events.add_argument(
        "--all", action="store_true", help="every event since --since, page after page (--limit per page)"
    )
    events.add_argument(
        "--shadow",
        action="store_true",
        help="only the decisions of profiles in shadow mode (what would have been done, and why)",
    )
    events.set_defaults(handler=run_events)

    quarantine = subparsers.add_parser(
        "quarantine", parents=[common], help="ask a node's agent to quarantine it"
    )
    quarantine.add_argument("name", metavar="NODE", type=node_name)
    quarantine.add_argument("--reason", required=True, help="why (recorded in the history)")
    quarantine.add_argument("--by", help=argparse.SUPPRESS)  # ignored: the aggregator records who you are
    quarantine.set_defaults(handler=run_quarantine)

    release = subparsers.add_parser("release", parents=[common], help="ask a node's agent to release it")
    release.add_argument("name", metavar="NODE", type=node_name)
    release.add_argument("--reason", default="released by a human", help="why (recorded in the history)")
    release.add_argument(
        "--yes", action="store_true", help="do not ask, even for a node whose incident was not remediated"
    )
    release.add_argument("--by", help=argparse.SUPPRESS)  # ignored: the aggregator records who you are
    release.set_defaults(handler=run_release)

    breaker = subparsers.add_parser("breaker", parents=[common], help="the fleet circuit breaker")
    breaker.add_argument("operation", nargs="?", choices=["status", "reset"], default="status")
    breaker.add_argument("--reason", default="", help="why it is being reset (recorded)")
    breaker.add_argument("--by", help=argparse.SUPPRESS)  # ignored: the aggregator records who you are
    breaker.set_defaults(handler=run_breaker)
    _register_alert_commands(subparsers, common)


def _register_alert_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    alerts = subparsers.add_parser("alerts", parents=[common], help="alerts and their deliveries")
    alerts.add_argument("--failed", action="store_true", help="only alerts dead-lettered at some sink")
    alerts.add_argument("--retry", type=int, metavar="ID", help="send this dead-lettered delivery again")
    alerts.add_argument(
        "--force", action="store_true", help="with --retry: send it again even though it was delivered"
    )
    alerts.add_argument("--limit", type=int, default=50, help="at most this many alerts (default 50)")
    alerts.set_defaults(handler=run_alerts)

    silence = subparsers.add_parser(
        "silence", parents=[common], help="mute alerts about a node or a label selector for a while"
    )
    silence.add_argument("name", metavar="NODE", nargs="?", type=node_name, help="the node to silence")
    silence.add_argument(
        "--selector", action="append", default=[], metavar="KEY=VALUE", help="node label (repeatable)"
    )
    silence.add_argument(
        "--for", dest="duration", metavar="DURATION", help="how long: 30m, 2h, 1d (required to silence)"
    )
    silence.add_argument("--reason", help="why, shown with the silence (required to silence)")
    silence.add_argument("--by", help=argparse.SUPPRESS)  # ignored: the aggregator records who you are
    silence.add_argument("--list", action="store_true", help="list the active silences")
    silence.add_argument("--remove", type=int, metavar="ID", help="end this silence now")
    silence.add_argument(
        "--force", action="store_true", help="silence a node even though it never reported (a name to come)"
    )
    silence.set_defaults(handler=run_silence)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help=f"aggregator URL (default: ${URL_ENV}, the config file, {DEFAULT_URL})")
    common.add_argument("--token", help=f"API token (default: ${TOKEN_ENV} or the config file)")
    common.add_argument(
        "--config", metavar="FILE", help=f"YAML file with a 'client' section (default: ${CONFIG_ENV})"
    )
    common.add_argument(
        "--ca-file", metavar="FILE", help=f"CA that signed an https aggregator's certificate (${CA_FILE_ENV})"
    )
    common.add_argument(
        "--client-cert",
        metavar="FILE",
        help=f"client certificate (PEM), if the aggregator asks (${CLIENT_CERT_ENV})",
    )
    common.add_argument("--client-key", metavar="FILE", help=f"its private key (PEM) (${CLIENT_KEY_ENV})")
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the aggregator")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return common


@dataclass(frozen=True)
class Connection:
    """Where the aggregator is and how to authenticate."""

    url: str
    token: str | None
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None


def resolve_connection(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Connection:
    """Flag, then environment, then config file, then the default URL."""
    env = dict(os.environ) if environ is None else environ
    config_path = args.config or env.get(CONFIG_ENV)
    section: dict[str, Any] = _client_section(config_path) if config_path else {}
    url = str(args.url or env.get(URL_ENV) or section.get("aggregator_url") or DEFAULT_URL)
    _check_url(
        url, "--url" if args.url else URL_ENV if env.get(URL_ENV) else f"{config_path}: aggregator_url"
    )
    token = args.token or env.get(TOKEN_ENV) or section.get("token") or _token_file(section.get("token_file"))
    ca_file, cert, key = (
        getattr(args, flag, None) or env.get(variable) or section.get(key)
        for flag, variable, key in (
            ("ca_file", CA_FILE_ENV, "ca_file"),
            ("client_cert", CLIENT_CERT_ENV, "client_cert_file"),
            ("client_key", CLIENT_KEY_ENV, "client_key_file"),
        )
    )
    return Connection(
        url=str(url),
        token=str(token) if token else None,
        ca_file=Path(str(ca_file)) if ca_file else None,
        client_cert=Path(str(cert)) if cert else None,
        client_key=Path(str(key)) if key else None,
    )


def _check_url(url: str, source: str) -> None:
    """A URL the client can use: http or https, a host, a port that is a number (one line otherwise)."""
    from urllib.parse import urlsplit

    problem = None
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number in range
    except ValueError as exc:
        problem = str(exc)
    else:
        if parts.scheme not in {"http", "https"}:
            problem = "it must begin with http:// or https://"
        elif not parts.hostname:
            problem = "it names no host"
        elif port == 0:
            problem = "port 0"
    if problem:
        raise CliError(f"{source}: {url!r} is not an aggregator URL ({problem})", 2)


CLIENT_KEYS = ("aggregator_url", "token", "token_file", "ca_file", "client_cert_file", "client_key_file")
OTHER_SECTIONS = ("aggregator", "checks")
"""Sections of a shared file that other parts read (``gpuhealth aggregator``, ``gpuhealth check``)."""


def _client_section(config_path: str) -> dict[str, Any]:
    """The file's ``client:`` section; an unknown key in it, or an unknown section, is one line (a typo
    would otherwise leave the default URL or no token, and a misleading error about those)."""
    data = load_yaml_mapping(config_path, exit_code=EXIT_FAILURE)
    known_sections = {"client", *OTHER_SECTIONS, *_agent_keys()}
    unknown = sorted(str(key) for key in data if key not in known_sections)
    if unknown:
        raise CliError(
            f"{config_path}: unknown section {unknown[0]!r} (the on-call commands read 'client'; "
            f"known: {', '.join(['client', *OTHER_SECTIONS])} and the agent's keys)",
            EXIT_FAILURE,
        )
    client = data.get("client") or {}
    if not isinstance(client, dict):
        raise CliError(f"{config_path}: the 'client' section must be a mapping", EXIT_FAILURE)
    unknown = sorted(str(key) for key in client if key not in CLIENT_KEYS)
    if unknown:
        raise CliError(
            f"{config_path}: unknown key client.{unknown[0]} (known: {', '.join(CLIENT_KEYS)})", EXIT_FAILURE
        )
    return client


def _agent_keys() -> frozenset[str]:
    """The agent's top-level keys: a node's one file may hold its agent's settings and a client section."""
    from agent.settings import AgentSettings

    return frozenset(AgentSettings.model_fields)


def _token_file(path: object) -> str | None:
    if not path:
        return None
    try:
        return Path(str(path)).read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise CliError(f"{path}: cannot read the token file: {exc.strerror or exc}", EXIT_FAILURE) from exc


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[AggregatorClient]:
    """A client whose failures become one-line CLI errors."""
    from agent.uplink.client import AggregatorClient, AggregatorError, PermitRefused, tls_context

    connection = resolve_connection(args)
    try:
        verify = tls_context(connection.ca_file, connection.client_cert, connection.client_key)
        with AggregatorClient(
            connection.url, connection.token, timeout_s=args.timeout, retries=1, verify=verify
        ) as client:
            yield client
    except PermitRefused as exc:
        raise CliError(str(exc), EXIT_FAILURE) from exc
    except AggregatorError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from exc


def _print_json(value: BaseModel | list[Any]) -> None:
    from pydantic import TypeAdapter

    data = TypeAdapter(type(value)).dump_json(value, indent=2, by_alias=True)
    sys.stdout.write(data.decode() + "\n")


def run_status(args: argparse.Namespace) -> int:
    """``gpuhealth status`` (with the active silences)."""
    from agent.uplink.client import NotFound
    from gpuhealth.cli.incident_views import open_incidents, print_open_incidents

    with _client(args) as client:
        summary = client.summary()
        incidents, done = open_incidents(client) if summary.open_incidents else ([], {})
        try:
            silences = client.silences()
        except NotFound:  # an aggregator from before alerts: no silences to show
            silences = []
    if args.json:
        data = summary.model_dump(mode="json") | {
            "incidents": [
                incident.model_dump(mode="json") | {"done": done.get(incident.id)} for incident in incidents
            ],
            "silences": [s.model_dump(mode="json") for s in silences],
        }
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        print_summary(terminal_safe_model(summary), _now())
        print_open_incidents(terminal_safe_model(incidents), terminal_safe_model(done), _now())
        print_silences(terminal_safe_model(silences), _now(), headline=False)
    return 0


def run_alerts(args: argparse.Namespace) -> int:
    """``gpuhealth alerts [--failed] [--retry ID]``."""
    with _client(args) as client:
        if args.retry is not None:
            from agent.uplink.client import PermitLapsed  # the aggregator's 409: delivered already

            try:
                delivery = client.retry_delivery(args.retry, force=args.force)
            except PermitLapsed as exc:
                raise CliError(f"{exc}: not sent again (--force sends it anyway)", 2) from exc
            if args.json:
                _print_json(delivery)
            else:
                print(f"delivery {delivery.id} to {delivery.sink} queued again")
            return 0
        alerts = client.alerts(failed=args.failed, limit=args.limit)
    if args.json:
        _print_json(alerts)
    else:
        print_alerts(terminal_safe_model(alerts), _now())
    return 0


_DURATION = re.compile(r"^\s*\d{1,9}\s*[smhdw]\s*$")


def run_silence(args: argparse.Namespace) -> int:
    """``gpuhealth silence NODE|--selector K=V --for 2h --reason TEXT``, ``--list``, ``--remove ID``."""
    if args.list or args.remove is not None:
        with _client(args) as client:
            if args.remove is not None:
                removed = client.remove_silence(args.remove)
            else:
                silences = client.silences()
        if args.remove is not None:
            if args.json:
                _print_json(removed)
            else:
                print(f"silence {removed.id} ended")
        elif args.json:
            _print_json(silences)
        else:
            print_silences(terminal_safe_model(silences), _now(), headline=True)
        return 0
    body = _silence_body(args)
    with _client(args) as client:
        if args.name and not args.force:
            _refuse_unknown_node(client, args.name)
        silence = client.silence(body)
    if args.json:
        _print_json(silence)
    else:
        print(
            f"silence {silence.id} on {_silence_target(silence)} until {silence.ends_at:%Y-%m-%d %H:%M:%S}Z"
        )
    return 0


def _refuse_unknown_node(client: AggregatorClient, name: str) -> None:
    """A silence of a name that never reported is most often a typo, which would mute nothing."""
    from agent.uplink.client import NotFound

    try:
        client.node(name)
    except NotFound:
        raise CliError(
            f"node {name} never reported, so a silence of it would mute nothing now; check the name, or "
            "add --force to silence a node that is still to come",
            2,
        ) from None


def _silence_body(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from aggregator.timespec import parse_since
    from core.alerts_api import SilenceCreate

    if not args.duration or not _DURATION.match(args.duration):
        raise CliError("--for: give a duration such as 30m, 2h or 1d", 2)
    if not args.reason:
        raise CliError("--reason is required", 2)
    if bool(args.name) == bool(args.selector):
        raise CliError("give either NODE or --selector KEY=VALUE, not both", 2)
    selector: dict[str, str] = {}
    for item in args.selector:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--selector: expected KEY=VALUE, got {item!r}", 2)
        selector[key] = value
    now = _now()
    seconds = (now - parse_since(args.duration, now)).total_seconds()
    try:
        return SilenceCreate(node=args.name, selector=selector, duration_s=seconds, reason=args.reason)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CliError(f"invalid silence {where}: {first['msg']}".replace(" : ", ": "), 2) from exc


def run_node(args: argparse.Namespace) -> int:
    """``gpuhealth node NODE``."""
    with _client(args) as client:
        detail = client.node(args.name)
    if args.json:
        _print_json(detail)
    else:
        print_node(terminal_safe_model(detail), _now())
    return 0


def run_events(args: argparse.Namespace) -> int:
    """``gpuhealth events``."""
    from aggregator.timespec import TimeSpecError, parse_since

    try:
        parse_since(args.since, _now())
    except TimeSpecError as exc:
        raise CliError(f"--since: {exc}", 2) from exc
    more, total = False, None
    kind = "shadow" if args.shadow else None
    with _client(args) as client:
        if args.all:
            events = client.events(
                since=args.since, node=args.node, limit=args.limit, all_pages=True, kind=kind
            )
        else:
            events, more, total = client.events_found(
                since=args.since, node=args.node, limit=args.limit, kind=kind
            )
    if args.json:
        _print_json(events)
    else:
        print_events(terminal_safe_model(events), _now())
    if more:
        # On stderr, so that --json stays one JSON document; a person sees it under the table either way.
        print(_fewer_than_found(len(events), total, args.since), file=sys.stderr)
    return 0


def _fewer_than_found(shown: int, total: int | None, since: str) -> str:
    """The line that says a list is not all there is: "200 of 254 events since 1h (the newest); ..."."""
    found = f"{shown} of {total}" if total is not None else f"the newest {shown} of more"
    return f"{found} events since {since} shown (the newest); --all for the rest"


def run_quarantine(args: argparse.Namespace) -> int:
    """``gpuhealth quarantine NODE --reason TEXT``."""
    with _client(args) as client:
        request = client.quarantine(args.name, reason=args.reason)
    return _print_request(args, request)


REMEDIATING_ACTIONS = frozenset({"reset", "reboot", "validate"})
"""Steps that deal with a fault (a drain only moves the work away); an incident with none of them done is
not remediated."""


def run_release(args: argparse.Namespace) -> int:
    """``gpuhealth release NODE``: asks first when the node's open incident was not remediated."""
    with _client(args) as client:
        if not args.yes:
            warning = _release_warning(client, args.name)
            if warning:
                confirm(warning, yes=False)
        request = client.release(args.name, reason=args.reason)
    return _print_request(args, request)


def _release_warning(client: AggregatorClient, name: str) -> str | None:
    """What a release would skip, when the node's open incident has had no remediation step done."""
    from agent.uplink.client import NotFound

    try:
        detail = client.node(name)
    except NotFound:
        return None  # the aggregator answers for an unknown node itself
    incident = detail.incident
    if incident is None or not incident.open:
        return None
    timeline = client.incident(incident.id).timeline
    done = {
        str(event.details.get("action"))
        for event in timeline
        if event.kind == "action" and event.details.get("result") == "ok"
    }
    if done & REMEDIATING_ACTIONS:
        return None
    reasons = ", ".join(incident.reasons) or "no reason given"
    return (
        f"{name} has open incident {incident.id} ({reasons}; action {incident.action.value}) and none of "
        f"{', '.join(sorted(REMEDIATING_ACTIONS))} was done for it: releasing puts the node back in "
        "service as it is"
    )


def _print_request(args: argparse.Namespace, request: NodeRequest) -> int:
    if args.json:
        _print_json(request)
    else:
        print(f"{request.kind} of {request.node} requested (request {request.id}); its agent applies it next")
    return 0


def run_breaker(args: argparse.Namespace) -> int:
    """``gpuhealth breaker [status|reset]``."""
    with _client(args) as client:
        if args.operation == "reset":
            status = client.breaker_reset(reason=args.reason)
        else:
            status = client.breaker_status()
    if args.json:
        _print_json(status)
    else:
        print_breaker(terminal_safe_model(status), _now())
    return 0


def _now() -> datetime:
    return datetime.now(UTC)


# --- rendering (rich tables; plain when stdout is not a terminal or NO_COLOR is set) -------------------

STATE_STYLE = {
    "healthy": "green",
    "degraded": "yellow",
    "unhealthy": "bold red",
    "quarantined": "red",
    "testing": "cyan",
    "unknown": "magenta",
    "stale": "dim magenta",
}


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _when(moment: datetime | None, now: datetime) -> str:
    from gpuhealth.cli.incident_views import when

    return when(moment, now)


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def _table(*columns: str) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def print_summary(summary: FleetSummary, now: datetime) -> None:
    """Nodes by state, the breaker, the budget, held and stale nodes."""
    console = _console()
    console.print(
        f"[bold]{summary.nodes}[/] nodes, {summary.gpus} GPUs, {summary.open_incidents} open incidents"
    )
    table = _table("STATE", "NODES")
    for state, count in sorted(summary.by_state.items(), key=lambda item: -item[1]):
        table.add_row(_state(state), str(count))
    console.print(table)
    _print_breaker_line(console, summary.breaker, now)
    budget = summary.budget
    console.print(f"budget: {budget.in_use} of {budget.limit} permits in use")
    if summary.profiles:
        counts = ", ".join(f"{name} {count}" for name, count in sorted(summary.profiles.items()))
        console.print("profiles: " + escape(counts))
    if summary.quarantined:
        console.print("[red]quarantined or held:[/] " + escape(", ".join(summary.quarantined)))
    if summary.stale:
        console.print("[magenta]stale (stopped reporting):[/] " + escape(", ".join(summary.stale)))


def _print_breaker_line(console: Console, status: BreakerStatus, now: datetime) -> None:
    if status.state == "tripped":
        console.print(
            f"breaker: [bold red]TRIPPED[/] {_when(status.tripped_at, now)}: {escape(status.reason or '')}"
        )
    else:
        console.print(
            f"breaker: [green]closed[/] ({status.recent_unhealthy} of {status.gpu_nodes} nodes turned "
            f"unhealthy in the last {status.window_s:.0f} s; trips above {status.threshold_percent:g} %)"
        )


def print_breaker(status: BreakerStatus, now: datetime) -> None:
    """One line: closed (with recent count) or tripped (since when, why)."""
    console = _console()
    _print_breaker_line(console, status, now)
    if status.reset_at is not None:
        console.print(f"last reset {_when(status.reset_at, now)} by {escape(status.reset_by or 'unknown')}")


def print_node(detail: NodeDetail, now: datetime) -> None:
    """Headline, GPUs, findings, incident, pending requests, permit and timeline. While an incident is open
    its action heads the node and its GPUs are marked, even once the findings that opened it cleared."""
    console = _console()
    incident = detail.incident if detail.incident and detail.incident.open else None
    action = incident.action if incident is not None else detail.action
    console.print(
        Text.assemble(
            (detail.name, "bold"),
            f" ({detail.orchestrator}" + (f", profile {detail.profile}" if detail.profile else "") + "): ",
            _state(detail.state),
            f" action {action.value}" + (" (its incident's)" if incident and action != detail.action else ""),
            f", last report {_when(detail.last_report_at, now)}",
        )
    )
    if detail.hold:
        console.print(f"[red]held until a human releases it:[/] {escape(detail.hold)}")
    in_incident = {gpu.uuid for gpu in incident.gpus} if incident is not None else set()
    index = {gpu.uuid: gpu.index for gpu in detail.gpus}
    if detail.gpus:
        gpus = _table("GPU", "MODEL", "SERIAL", "PCI", "UUID", "STATUS")
        for gpu in detail.gpus:
            status = status_text(gpu.status)
            if gpu.uuid in in_incident:
                status = Text.assemble(status, (", in the open incident", "bold red"))
            gpus.add_row(
                str(gpu.index),
                Text(gpu.name or "-"),
                Text(gpu.serial or "-"),
                Text(gpu.pci_bus_id or "-"),
                Text(gpu.uuid),
                status,
            )
        console.print(gpus)
    if detail.findings:
        findings = _table("GPU", "STATUS", "CODE", "ACTION", "MESSAGE")
        for finding in detail.findings:
            where = "node" if finding.gpu is None else str(index.get(finding.gpu, finding.gpu))
            findings.add_row(
                Text(where),
                status_text(finding.status),
                Text(finding.code),
                finding.action.value,
                Text(finding.shown(datetime.now(UTC))),
            )
        console.print(findings)
    elif incident is not None:
        console.print("no findings now; the incident stays open until the node is validated and released")
    _print_peer_findings(detail, index, console)
    if detail.incident:
        print_incident_head(detail.incident, now, console)
    for request in detail.pending_requests:
        console.print(f"pending {request.kind} by {escape(request.requested_by)}: {escape(request.reason)}")
    if detail.permit:
        console.print(
            f"permit {detail.permit.id} for {detail.permit.action.value}, expires "
            f"{_when(detail.permit.expires_at, now)}"
        )
    if detail.timeline:
        print_events(detail.timeline, now, console=console, timeline=True)


def _print_peer_findings(detail: NodeDetail, index: dict[str, int], console: Console) -> None:
    """The node's GPUs that stand out from their peers (same model and driver), if any."""
    if not detail.peer_findings:
        return
    peers = _table("GPU", "STATUS", "AGAINST ITS PEERS (same model and driver; a warning, nothing drained)")
    for finding in detail.peer_findings:
        peers.add_row(
            Text(str(index.get(finding.gpu or "", finding.gpu or "node"))),
            status_text(finding.status),
            Text(f"{finding.code}: {finding.message}"),
        )
    console.print(peers)


def print_incident_head(incident: IncidentSummary, now: datetime, console: Console) -> None:
    """The incident's line, then each GPU it is about and the findings that opened it."""
    from gpuhealth.cli.incident_views import gpu_text

    console.print(
        f"incident [bold]{escape(incident.id)}[/] since {_when(incident.started_at, now)}: "
        f"{escape(', '.join(incident.reasons)) or '-'}; action {incident.action.value}"
    )
    for gpu in incident.gpus:
        console.print(Text.assemble("  ", (gpu_text(gpu), "bold red")))
    index = {gpu.uuid: gpu.index for gpu in incident.gpus}
    for finding in incident.opened_by:
        on = f"GPU {index.get(finding.gpu, finding.gpu)}" if finding.gpu else "the node"
        console.print(Text(f"  opened by {finding.code} on {on}: {finding.message} ({finding.action.value})"))


def print_events(
    events: list[Event], now: datetime, console: Console | None = None, *, timeline: bool = False
) -> None:
    """One row per event, oldest first; a repeated one once, with its count and time range. A
    ``timeline`` (a node's, an incident's) reads in the order of cause, one transition's node writes in
    one row."""
    from aggregator.timeline import arrange
    from gpuhealth.cli.incident_views import clock

    console = console or _console()
    if not events:
        console.print("no events")
        return
    rows = arrange(events, group=True) if timeline else events
    table = _table("WHEN", "NODE", "KIND", "WHAT")
    for event in rows:
        what = event.message
        if event.count > 1 and event.last_at is not None:
            what = f"{what} (x{event.count}, {clock(event.at)} to {clock(event.last_at)})"
        table.add_row(_when(event.at, now), Text(event.node or "-"), event.kind, Text(what))
    console.print(table)


def _silence_target(silence: Silence) -> str:
    if silence.node:
        return silence.node
    return ",".join(f"{key}={value}" for key, value in sorted(silence.selector.items()))


def print_silences(silences: list[Silence], now: datetime, *, headline: bool) -> None:
    """Active silences: what is muted, until when, why."""
    console = _console()
    if not silences:
        if headline:
            console.print("no active silences")
        return
    console.print(f"[yellow]silenced ({len(silences)}):[/]")
    table = _table("ID", "WHAT", "UNTIL", "BY", "REASON")
    for silence in silences:
        table.add_row(
            str(silence.id),
            Text(_silence_target(silence)),
            _when(silence.ends_at, now),
            Text(silence.created_by),
            Text(silence.reason),
        )
    console.print(table)


def print_alerts(alerts: list[AlertView], now: datetime) -> None:
    """One row per alert with each sink's delivery state."""
    console = _console()
    if not alerts:
        console.print("no alerts")
        return
    table = _table("WHEN", "KIND", "SEVERITY", "WHAT", "DELIVERIES")
    for alert in alerts:
        if alert.silence_id is not None:
            deliveries = f"silenced ({alert.silence_id})"
        else:
            deliveries = (
                "; ".join(
                    f"#{d.id} {d.sink}: {d.status}"
                    + (
                        f" after {d.attempts} ({d.last_error})"
                        if d.status != "delivered" and d.attempts
                        else ""
                    )
                    for d in alert.deliveries
                )
                or "no route"
            )
        table.add_row(
            _when(alert.created_at, now), alert.kind, alert.severity, Text(alert.summary), Text(deliveries)
        )
    console.print(table)
