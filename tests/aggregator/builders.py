"""Agent reports as a real agent would send them (format gpuhealth.report/v1)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

TOKEN = "test-token-0123456789abcdef0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

_FINDINGS = {
    "healthy": [],
    "degraded": [("ecc", "warn", "ECC_SBE_RATE", "restart_app")],
    "unhealthy": [("xid", "fail", "XID_79", "reboot")],
    "quarantined": [("xid", "fail", "XID_79", "reboot")],
    "unknown": [("nvml", "unknown", "NVML_UNAVAILABLE", "none")],
    "testing": [],
}
_NODE_STATUS = {
    "healthy": "ok",
    "degraded": "warn",
    "unhealthy": "fail",
    "quarantined": "fail",
    "unknown": "unknown",
    "testing": "ok",
}


def report(
    node: str,
    seq: int,
    state: str = "healthy",
    *,
    gpus: int = 8,
    incident: str | None = None,
    actions: list[dict[str, Any]] | None = None,
    acknowledged: list[int] | None = None,
    interval_s: float | None = 30,
    sent_at: datetime | None = None,
) -> dict[str, Any]:
    """A JSON-ready report; ``incident`` names the open incident (opened at a fixed time)."""
    findings = [
        {
            "check": check,
            "gpu": f"GPU-{node}-0",
            "status": status,
            "code": code,
            "message": code,
            "action": action,
        }
        for check, status, code, action in _FINDINGS[state]
    ]
    worst_action = findings[0]["action"] if findings else "none"
    body: dict[str, Any] = {
        "schema": "gpuhealth.report/v1",
        "node": node,
        "seq": seq,
        "sent_at": (sent_at or datetime(2026, 1, 1, tzinfo=UTC)).isoformat(),
        "interval_s": interval_s,
        "orchestrator": "kubernetes",
        "state": state,
        "verdict": {
            "node": node,
            "status": _NODE_STATUS[state],
            "action": worst_action,
            "findings": findings,
        },
        "gpus": [
            {"uuid": f"GPU-{node}-{i}", "index": i, "name": "NVIDIA H200", "status": "ok"}
            for i in range(gpus)
        ],
        "labels": {"topology.kubernetes.io/zone": "zone-a"},
        "actions": actions or [],
        "acknowledged_requests": acknowledged or [],
    }
    if incident is not None:
        body["incident"] = {
            "id": incident,
            "started_at": body["sent_at"],
            "reasons": [code for _c, _s, code, _a in _FINDINGS[state]] or ["XID_79"],
            "action": worst_action,
        }
    return body
