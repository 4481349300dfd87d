"""``gpuhealth report [--since 30d] [--by model|driver|pool|node] [--json]``: how reliable the fleet is.

Incidents, mean time between incidents, mean time to repair (fault to release), GPU-hours out of service by
fault class and action, the share of incidents that needed a reset, a reboot or a replacement, repeat
offenders, and the fleet-health ratio, from the aggregator's ``GET /v1/reliability``.
"""

from __future__ import annotations

import argparse

from gpuhealth.cli.fleet_cmd import _client, _common_options, _console, _print_json, _table

GROUPS = ("model", "driver", "pool", "node")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the command tree."""
    report = subparsers.add_parser(
        "report", parents=[_common_options()], help="fleet reliability: incidents, MTBI, MTTR, GPU-hours lost"
    )
    report.add_argument("--since", default="30d", help="window: 30d (default), 12h, or an ISO time")
    report.add_argument("--by", choices=GROUPS, default="model", help="group by (default: model)")
    report.set_defaults(handler=run_report)


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 24:.1f} d" if value >= 48 else f"{value:.1f} h"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def run_report(args: argparse.Namespace) -> int:
    """``gpuhealth report``."""
    with _client(args) as client:
        report = client.reliability(since=args.since, by=args.by)
    if args.json:
        _print_json(report)
        return 0
    console = _console()
    ratio = "-" if report.fleet_health_ratio is None else f"{100 * report.fleet_health_ratio:.3f} %"
    console.print(
        f"since {report.since:%Y-%m-%d %H:%M} UTC: {report.incidents} incidents, "
        f"{report.gpu_hours_out:.1f} of {report.gpu_hours_observed:.0f} GPU-hours out of service; "
        f"fleet health {ratio}"
    )
    table = _table(
        args.by.upper(),
        "NODES",
        "GPUS",
        "INCIDENTS",
        "MTBI",
        "MTTR",
        "GPU-H OUT",
        "RESET",
        "REBOOT",
        "REPLACE",
    )
    for group in report.groups:
        table.add_row(
            group.key,
            str(group.nodes),
            str(group.gpus),
            str(group.incidents) + (f" ({group.open_incidents} open)" if group.open_incidents else ""),
            _hours(group.mtbi_hours),
            _hours(group.mttr_hours),
            f"{group.gpu_hours_out:.1f}",
            _share(group.reset_share),
            _share(group.reboot_share),
            _share(group.replace_share),
        )
    console.print(table)
    classes: dict[str, float] = {}
    actions: dict[str, float] = {}
    for group in report.groups:
        for name, hours in group.gpu_hours_out_by_class.items():
            classes[name] = classes.get(name, 0.0) + hours
        for name, hours in group.gpu_hours_out_by_action.items():
            actions[name] = actions.get(name, 0.0) + hours
    if classes:
        console.print(
            "GPU-hours out by fault class: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(classes.items()))
        )
        console.print(
            "GPU-hours out by action: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(actions.items()))
        )
    if report.repeat_offenders:
        console.print(
            "repeat offenders: "
            + ", ".join(f"{node} ({count})" for node, count in report.repeat_offenders.items())
        )
    return 0
