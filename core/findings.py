"""Findings and the node verdict (docs/checks.md, "Findings and the verdict")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field


class Status(StrEnum):
    """A finding's or node's status, ordered ok < unknown < warn < fail."""

    OK = "ok"
    UNKNOWN = "unknown"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _STATUS_ORDER.index(self)

    @property
    def exit_code(self) -> int:
        """Nagios / NHC convention: 0 ok, 1 warn, 2 fail, 3 unknown."""
        return {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2, Status.UNKNOWN: 3}[self]


_STATUS_ORDER = (Status.OK, Status.UNKNOWN, Status.WARN, Status.FAIL)


class Action(StrEnum):
    """Recommended remediation, ordered from least to most severe.

    NVIDIA's XID resolution buckets map as: IGNORE -> none, RESTART_APP -> restart_app,
    RESET_GPU -> reset_gpu, drain and reset -> drain_and_reset, RESTART_VM / RESTART_BM -> reboot,
    CONTACT_SUPPORT -> replace.
    """

    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    DRAIN_AND_RESET = "drain_and_reset"
    REBOOT = "reboot"
    REPLACE = "replace"

    @property
    def rank(self) -> int:
        return _ACTION_ORDER.index(self)

    @property
    def takes_node_out_of_service(self) -> bool:
        """reset_gpu and worse mean the node (or that GPU) must stop taking work."""
        return self.rank >= Action.RESET_GPU.rank


_ACTION_ORDER = tuple(Action)


def worst_status(statuses: Iterable[Status]) -> Status:
    """The most severe status; ``ok`` for none at all."""
    return max(statuses, key=lambda status: status.rank, default=Status.OK)


def worst_action(actions: Iterable[Action]) -> Action:
    """The most severe action; ``none`` for none at all."""
    return max(actions, key=lambda action: action.rank, default=Action.NONE)


SHARED_CAUSE_CODES: Final = ("IB_FABRIC_DOWN",)
"""Finding codes that, reported by several nodes at once, have one cause outside every node (the whole
InfiniBand fabric down: the subnet manager gone). The aggregator's breaker treats them so: no node is drained
for them one by one."""


class Finding(BaseModel):
    """One observation of one check about one GPU (``gpu`` is the UUID) or the node (``gpu`` null)."""

    model_config = ConfigDict(frozen=True)

    check: str = Field(description="The check family that produced it, e.g. xid, ecc, pcie.")
    gpu: str | None = Field(description="GPU UUID, or null for a node-level finding.")
    status: Status
    code: str = Field(description="Stable identifier such as XID_79 or ROW_REMAP_PENDING.")
    message: str
    action: Action
    since: datetime | None = Field(
        default=None,
        exclude_if=lambda since: since is None,  # only on a stamped finding: the rest keep the v1 shape
        description=(
            "For an unknown finding: since when this signal has been unknown (UTC), so a stale verdict is "
            "never taken for a fresh one (optional extension)."
        ),
    )

    def shown(self, now: datetime) -> str:
        """The message as people see it: an unknown one with its age ("unknown for 14 min: ...")."""
        if self.status is not Status.UNKNOWN or self.since is None:
            return self.message
        return f"unknown for {age_text((now - self.since).total_seconds())}: {self.message}"


def age_text(seconds: float) -> str:
    """A duration as people read it: 40 s, 14 min, 3 h, 2 d."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def with_unknown_ages(
    findings: Iterable[Finding], held: Mapping[tuple[str | None, str], datetime], now: datetime
) -> tuple[list[Finding], dict[tuple[str | None, str], datetime]]:
    """Each unknown finding stamped with since when it has been unknown (``held``: the previous pass's
    stamps, by GPU and code), and the stamps to hold for the next pass; a finding that is gone or no longer
    unknown starts afresh."""
    stamped: list[Finding] = []
    stamps: dict[tuple[str | None, str], datetime] = {}
    for finding in findings:
        if finding.status is not Status.UNKNOWN:
            stamped.append(finding)
            continue
        key = (finding.gpu, finding.code)
        since = finding.since or held.get(key) or now
        stamps[key] = since
        stamped.append(finding if finding.since == since else finding.model_copy(update={"since": since}))
    return stamped, stamps


class Verdict(BaseModel):
    """The node verdict printed by ``gpuhealth check --json``."""

    model_config = ConfigDict(frozen=True)

    node: str
    status: Status
    action: Action
    findings: list[Finding]

    @classmethod
    def from_findings(cls, node: str, findings: Iterable[Finding]) -> Verdict:
        """Node status is the worst finding's; node action the most severe finding's."""
        ordered = sorted(findings, key=lambda f: (-f.status.rank, -f.action.rank, f.gpu or "", f.code))
        return cls(
            node=node,
            status=worst_status(f.status for f in ordered),
            action=worst_action(f.action for f in ordered),
            findings=ordered,
        )

    @property
    def exit_code(self) -> int:
        return self.status.exit_code
