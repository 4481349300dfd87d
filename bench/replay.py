"""Replay 30 days of a 1,000-node, 8-GPU fleet's history through a candidate policy.

``python -m bench.replay [--json] [--nodes N] [--days D] [--seed S]``: a synthetic history with a realistic
fault mix (``synthetic_history``), replayed through a ``drain`` policy with the default budget and breaker
by ``gpuhealth.replay.engine.replay``; prints ``nodes``, ``days``, ``incidents``, ``wall_s`` (the replay
only, not the building of the history) and the would-have totals.

The fault rate is NVIDIA's GeForce NOW figure, about 19 remediation requests per 1,000 nodes a day
(shared REFERENCE, "Figures from the field"), split by Meta's Llama 3 run's causes (GPU faults 30 %, HBM 17 %
of 419 interruptions) over the XIDs and findings that stand for them; application XIDs (13, 31, which take
no node out) come at twice that rate, polled warnings (thermal slowdown) at the same rate, and one driver
roll-out makes 6 % of the nodes fail within five minutes on day 12 (what the breaker is for).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from checks.xid_catalogue import status_for_action
from core.aggregator_api import Event
from core.findings import Action
from gpuhealth.replay.engine import Candidate, replay
from gpuhealth.replay.history import History, HistoryNode

START = datetime(2026, 11, 1, tzinfo=UTC)
RATE_PER_1000_NODE_DAYS = 19.0
# (check, code, action, share): out-of-service faults, split as the field figures say.
FAULTS: tuple[tuple[str, str, Action, float], ...] = (
    ("xid", "XID_79", Action.REBOOT, 0.15),  # fell off the bus
    ("presence", "GPU_LOST", Action.REBOOT, 0.05),
    ("ecc", "ECC_DBE_VOLATILE", Action.RESET_GPU, 0.10),  # HBM: 17 % with the row remaps
    ("row_remap", "ROW_REMAP_PENDING", Action.RESET_GPU, 0.07),
    ("xid", "XID_119", Action.RESET_GPU, 0.15),  # GSP
    ("xid", "XID_74", Action.RESET_GPU, 0.12),  # NVLink
    ("xid", "XID_109", Action.RESET_GPU, 0.08),
    ("xid", "XID_95", Action.RESET_GPU, 0.08),
    ("row_remap", "ROW_REMAP_FAILURE", Action.REPLACE, 0.05),
    ("xid", "XID_48", Action.RESET_GPU, 0.15),
)
APP_ERRORS = (("xid", "XID_13", Action.RESTART_APP), ("xid", "XID_31", Action.RESTART_APP))
ROLLOUT_DAY, ROLLOUT_SHARE = 12, 0.06


def finding(check: str, code: str, action: Action, gpu: str) -> dict[str, Any]:
    status = "warn" if check == "thermal" else status_for_action(action).value
    return {
        "check": check,
        "gpu": gpu,
        "status": status,
        "code": code,
        "message": code,
        "action": action.value,
    }


class _Rows:
    def __init__(self) -> None:
        self.rows: list[Event] = []

    def add(self, at: datetime, node: str, kind: str, message: str, **extra: Any) -> None:
        details = extra.pop("details", {})
        incident = extra.pop("incident_id", None)
        self.rows.append(
            Event(id=0, at=at, node=node, incident_id=incident, kind=kind, message=message, details=details)
        )

    def findings(self, at: datetime, node: str, found: list[dict[str, Any]]) -> None:
        details = {"findings": found, "reported_at": at.isoformat()}
        self.add(at, node, "findings", "findings", details=details)


def synthetic_history(nodes: int, days: int, seed: int = 7, *, interval_s: float = 10.0) -> History:
    """A fleet's history: findings rows for every fault, and what a mark-and-taint fleet did about it."""
    rng = random.Random(seed)
    names = [f"gpu-node-{number:04d}" for number in range(nodes)]
    rows = _Rows()
    until = START + timedelta(days=days)
    count = round(RATE_PER_1000_NODE_DAYS * nodes / 1000 * days)
    weights = [share for *_rest, share in FAULTS]
    for _ in range(count):
        node = rng.choice(names)
        at = START + timedelta(seconds=rng.uniform(0, days * 86400 - 86400))
        check, code, action, _share = rng.choices(FAULTS, weights)[0]
        _fault(rows, rng, node, at, (check, code, action))
    for _ in range(count * 2):
        node, at = rng.choice(names), START + timedelta(seconds=rng.uniform(0, days * 86400 - 3600))
        check, code, action = rng.choice(APP_ERRORS)
        gpu = f"GPU-{node}-{rng.randrange(8)}"
        rows.findings(at, node, [finding(check, code, action, gpu)])
        rows.findings(at + timedelta(seconds=interval_s), node, [])
    for _ in range(count):
        node, at = rng.choice(names), START + timedelta(seconds=rng.uniform(0, days * 86400 - 7200))
        rows.findings(at, node, [finding("thermal", "THERMAL_SLOWDOWN", Action.NONE, f"GPU-{node}-1")])
        rows.findings(at + timedelta(seconds=rng.uniform(60, 3600)), node, [])
    if days > ROLLOUT_DAY:
        rollout = START + timedelta(days=ROLLOUT_DAY, hours=3)
        for node in rng.sample(names, max(1, round(nodes * ROLLOUT_SHARE))):
            _fault(
                rows,
                rng,
                node,
                rollout + timedelta(seconds=rng.uniform(0, 300)),
                ("xid", "XID_79", Action.REBOOT),
            )
    ordered = sorted(rows.rows, key=lambda event: (event.at, event.node or ""))
    numbered = [event.model_copy(update={"id": number + 1}) for number, event in enumerate(ordered)]
    fleet = [HistoryNode(name=name, gpu_count=8, interval_s=interval_s) for name in names]
    return History(exported_at=until, since=START, until=until, nodes=fleet, events=numbered)


def _fault(rows: _Rows, rng: random.Random, node: str, at: datetime, fault: tuple[str, str, Action]) -> None:
    check, code, action = fault
    gpu = f"GPU-{node}-{rng.randrange(8)}"
    lasts = timedelta(seconds=rng.uniform(1200, 6 * 3600))  # until the node was repaired
    incident = f"inc-{node}-{at.strftime('%Y%m%dT%H%M%S')}"
    rows.findings(at, node, [finding(check, code, action, gpu)])
    rows.add(at, node, "incident_opened", f"incident opened: {code}", incident_id=incident)
    rows.add(
        at, node, "action", "taint ok", incident_id=incident, details={"action": "taint", "result": "ok"}
    )
    if check == "xid":  # an XID is read once; the GPU's state it left stays until the repair
        left = (
            finding("presence", "GPU_LOST", Action.REBOOT, gpu)
            if action is Action.REBOOT
            else finding("recovery_action", "RECOVERY_ACTION", Action.RESET_GPU, gpu)
        )
        rows.findings(at + timedelta(seconds=10), node, [left])
    rows.findings(at + lasts, node, [])
    if action is Action.REPLACE:  # held for a human, who released it once the board was replaced
        rows.add(at + lasts, node, "release_requested", "release requested")
    rows.add(
        at + lasts + timedelta(minutes=5), node, "incident_closed", "incident closed", incident_id=incident
    )


def candidate_drain() -> Candidate:
    """The policy the benchmark replays: mark, taint, cordon and drain with the default budget and breaker."""
    return Candidate.from_mapping({"policy": {"cordon": True, "drain": True}}, "bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    history = synthetic_history(args.nodes, args.days, args.seed)
    candidate = candidate_drain()
    started = time.perf_counter()
    result = replay(history, candidate)
    wall_s = time.perf_counter() - started
    figures = {
        "nodes": args.nodes,
        "gpus": args.nodes * 8,
        "days": args.days,
        "history_rows": len(history.events),
        "incidents": result.incidents,
        "wall_s": round(wall_s, 2),
        "target_s": 60,
        "would": result.would.as_dict(),
        "did": result.did.as_dict(),
        "breaker_trips": len(result.breaker_trips),
    }
    if args.json:
        sys.stdout.write(json.dumps(figures) + "\n")
    else:
        for key, value in figures.items():
            sys.stdout.write(f"{key}: {value}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
