"""The reliability report: how good is the fleet, by GPU model, driver, pool or node.

Computed from the incident history and the nodes' records, over a window (``since``, default 30 days):

* incidents: opened in the window;
* MTBI (mean time between incidents): node-hours observed in the window / incidents (a node is observed
  from the later of its first report and the window's start);
* MTTR (mean time to repair): fault to release, over the incidents of the window that closed;
* GPU-hours out of service: for each incident whose action takes capacity away (reset_gpu and worse), its
  time in the window (an open one up to now) x the node's GPUs, by fault class (the leading reason's family)
  and by action;
* repeat offenders: nodes with at least ``repeat_offender_incidents`` incidents in the window;
* the share of incidents that needed a reset, a reboot or a replacement;
* the fleet-health ratio: 1 - GPU-hours out of service / GPU-hours observed.

A group is the node's GPU model (its first GPU's name), its driver (from the GPU readings), its pool (the
labels the fleet page reads) or the node itself.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, or_, select

from aggregator.queries import POOL_LABELS
from aggregator.store.tables import incidents, nodes
from core.aggregator_api import ReliabilityGroup, ReliabilityReport

GroupBy = Literal["model", "driver", "pool", "node"]
OUT_OF_SERVICE = ("reset_gpu", "drain_and_reset", "reboot", "replace")
_FAULT_CLASSES = (
    ("XID_", "xid"),
    ("ECC_", "memory"),
    ("ROW_REMAP", "memory"),
    ("RETIRED_PAGES", "memory"),
    ("PCIE", "pcie"),
    ("NVLINK", "nvlink"),
    ("FABRIC", "fabric"),
    ("IB_", "fabric"),
    ("THERMAL", "thermal_power"),
    ("POWER", "thermal_power"),
    ("GPU_LOST", "gpu_lost"),
    ("GPU_MISSING", "gpu_lost"),
    ("DCGM_", "dcgm"),
    ("RECOVERY_ACTION", "driver_recovery"),
)


def fault_class(reasons: Iterable[str]) -> str:
    """The family of an incident's leading reason (xid, memory, pcie, nvlink, ...; manual, other)."""
    first = next(iter(reasons), "")
    if not first:
        return "other"
    if first.startswith(("MANUAL", "manual")):
        return "manual"
    return next((name for prefix, name in _FAULT_CLASSES if first.startswith(prefix)), "other")


@dataclass
class _Node:
    name: str
    gpus: int
    observed_h: float
    key: str


def _group_key(row: Any, by: GroupBy) -> str:
    gpus = sorted(row.gpus or [], key=lambda gpu: int(gpu.get("index", 0)))
    first = gpus[0] if gpus else {}
    if by == "model":
        return str(first.get("name") or "unknown model")
    if by == "driver":
        return str((first.get("readings") or {}).get("driver_version") or "unknown driver")
    if by == "pool":
        labels = row.labels or {}
        return next((str(labels[name]) for name in POOL_LABELS if name in labels), "no pool")
    return str(row.name)


def reliability(
    conn: Connection, now: datetime, *, since: datetime, by: GroupBy = "model", repeat_after: int = 3
) -> ReliabilityReport:
    """The report over ``since`` .. ``now``, grouped ``by``."""
    window_h = max((now - since).total_seconds() / 3600, 1e-9)
    known: dict[str, _Node] = {}
    for row in conn.execute(
        select(nodes.c.name, nodes.c.gpu_count, nodes.c.first_seen_at, nodes.c.gpus, nodes.c.labels)
    ):
        start = max(row.first_seen_at, since)
        observed = max((now - start).total_seconds() / 3600, 0.0)
        known[row.name] = _Node(row.name, int(row.gpu_count), observed, _group_key(row, by))
    query = select(incidents).where(
        or_(incidents.c.started_at >= since, incidents.c.ended_at.is_(None), incidents.c.ended_at >= since),
        incidents.c.started_at <= now,
    )
    rows = list(conn.execute(query.order_by(incidents.c.started_at)))
    groups: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "incidents": 0,
            "repairs": [],
            "by_class": Counter(),
            "by_action": Counter(),
            "actions": Counter(),
        }
    )
    per_node: Counter[str] = Counter()
    daily: Counter[str] = Counter()
    total_out = 0.0
    for incident in rows:
        node = known.get(incident.node)
        key = node.key if node is not None else "forgotten nodes"
        group = groups[key]
        opened_in_window = incident.started_at >= since
        if opened_in_window:
            group["incidents"] += 1
            group["actions"][incident.action] += 1
            per_node[incident.node] += 1
            daily[incident.started_at.date().isoformat()] += 1
            if incident.ended_at is not None:
                group["repairs"].append((incident.ended_at - incident.started_at).total_seconds() / 3600)
        if incident.action in OUT_OF_SERVICE and node is not None:
            start = max(incident.started_at, since)
            end = incident.ended_at or now
            hours = max((end - start).total_seconds() / 3600, 0.0) * node.gpus
            group["by_class"][fault_class(incident.reasons or [])] += hours
            group["by_action"][incident.action] += hours
            total_out += hours
    members: dict[str, list[_Node]] = defaultdict(list)
    for node in known.values():
        members[node.key].append(node)
    observed_gpu_h = sum(node.observed_h * node.gpus for node in known.values())
    result = []
    for key in sorted(set(members) | set(groups)):
        group = groups[key]
        nodes_here = members.get(key, [])
        node_h = sum(node.observed_h for node in nodes_here)
        gpu_h = sum(node.observed_h * node.gpus for node in nodes_here)
        count = group["incidents"]
        repairs = group["repairs"]
        out = sum(group["by_class"].values())
        actions: Counter[str] = group["actions"]
        result.append(
            ReliabilityGroup(
                key=key,
                nodes=len(nodes_here),
                gpus=sum(node.gpus for node in nodes_here),
                incidents=count,
                mtbi_hours=round(node_h / count, 2) if count else None,
                mttr_hours=round(sum(repairs) / len(repairs), 2) if repairs else None,
                open_incidents=count - len(repairs),
                gpu_hours_out=round(out, 2),
                gpu_hours_out_by_class={name: round(v, 2) for name, v in sorted(group["by_class"].items())},
                gpu_hours_out_by_action={name: round(v, 2) for name, v in sorted(group["by_action"].items())},
                reset_share=_share(actions, ("reset_gpu", "drain_and_reset"), count),
                reboot_share=_share(actions, ("reboot",), count),
                replace_share=_share(actions, ("replace",), count),
                health_ratio=round(1 - out / gpu_h, 6) if gpu_h else None,
            )
        )
    return ReliabilityReport(
        generated_at=now,
        since=since,
        by=by,
        window_hours=round(window_h, 2),
        incidents=sum(group.incidents for group in result),
        gpu_hours_observed=round(observed_gpu_h, 2),
        gpu_hours_out=round(total_out, 2),
        fleet_health_ratio=round(1 - total_out / observed_gpu_h, 6) if observed_gpu_h else None,
        repeat_offenders={node: count for node, count in per_node.most_common() if count >= repeat_after},
        incidents_per_day=[{"day": day, "incidents": daily[day]} for day in _days(since, now)],
        groups=result,
    )


def _share(actions: Counter[str], names: tuple[str, ...], count: int) -> float | None:
    return round(sum(actions[name] for name in names) / count, 4) if count else None


def _days(since: datetime, now: datetime) -> list[str]:
    days: list[str] = []
    day = since.date()
    while day <= now.date() and len(days) < 400:
        days.append(day.isoformat())
        day += timedelta(days=1)
    return days
