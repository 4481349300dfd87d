"""Findings and the node verdict (docs/checks.md, "Findings and the verdict")."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

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


class Finding(BaseModel):
    """One observation of one check about one GPU (``gpu`` is the UUID) or the node (``gpu`` null)."""

    model_config = ConfigDict(frozen=True)

    check: str = Field(description="The check family that produced it, e.g. xid, ecc, pcie.")
    gpu: str | None = Field(description="GPU UUID, or null for a node-level finding.")
    status: Status
    code: str = Field(description="Stable identifier such as XID_79 or ROW_REMAP_PENDING.")
    message: str
    action: Action


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
