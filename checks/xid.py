"""XID events judged with NVIDIA's catalogue and its workflows, per GPU.

One finding per (GPU, XID code), code ``XID_<n>``, with how often it was seen. The catalogue row gives the
default action; NVIDIA's workflows refine it with the other XIDs seen on the same GPU in the same snapshot
(the snapshot's event list *is* the window: the agent decides how far back it reaches):

* 48 alone -> reset_gpu; 48 with 63 or 64 -> drain_and_reset (WORKFLOW_XID_48).
* 45 -> none: it is logged whenever an application is torn down; alone it only hints at Fabric Manager,
  with other XIDs it is sympathetic to them (WORKFLOW_XID_45).
* 154 -> the recovery action its message names, else the GPU's ``recovery_action`` field.
* 64 -> reset_gpu; repeated -> ``xid.xid64_repeat_action`` (NVIDIA's investigatory CONTACT_SUPPORT).
* 13 / 31 repeated -> the message recommends diagnostics (WORKFLOW_XID_13 / 31).
* 74 -> reset_gpu, noting that the peer at the other end of the link may be the faulty one.
* 144-150 (NVLink5) -> by NVIDIA's decode sheet (checks/xid_nvlink5.py): the error status (XID 149 link
  events: the link-down reason) decides reset_gpu or none; the message's Fatal / Nonfatal word only where
  the sheet does not list the unit or status, and no message at all: reset_gpu.
* not in the catalogue (and NVML's 999) -> ``xid.unknown_action`` (contact-support level).

``xid.overrides`` then replaces the action of any code, ``none`` included (which silences it to ``ok``).

The same occurrence is often reported twice, by NVML's event set and by the kernel log. Counting both would
double the repeat counts that escalate 13/31/64, so an XID's count is the largest count any one source gave.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from checks.base import gpu_label
from checks.config import ChecksConfig
from checks.recovery_action import action_for_value, value_name
from checks.xid_catalogue import lookup, status_for_action
from checks.xid_nvlink5 import Resolution, decode
from core.findings import Action, Finding
from core.recovery_message import recovery_change_from_message
from core.snapshot import NodeSnapshot, XidEvent, pci_key

CHECK = "xid"


@dataclass(frozen=True, slots=True)
class _Subject:
    """Whom the findings are about: a listed GPU, or a PCI address no listed GPU has (node level)."""

    gpu: str | None
    where: str
    recovery_field: int | None


@dataclass(frozen=True, slots=True)
class _Context:
    """Everything a workflow needs to judge one XID code on one subject."""

    code: int
    events: Sequence[XidEvent]
    codes_seen: frozenset[int]
    subject: _Subject
    config: ChecksConfig

    @property
    def count(self) -> int:
        return occurrences(self.events)


@dataclass(frozen=True, slots=True)
class _Judgement:
    action: Action
    detail: str


def check_xid(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``XID_<n>`` findings for every GPU's events and for events tied to no listed GPU (node level)."""
    if not config.xid.enabled:
        return []
    per_gpu, orphans = _assign_events(snapshot)
    findings: list[Finding] = []
    for gpu, events in zip(snapshot.gpus, per_gpu, strict=True):
        subject = _Subject(gpu.uuid, gpu_label(gpu), gpu.recovery_action)
        findings.extend(_judge_events(events, subject, config))
    for where, events in orphans.items():
        findings.extend(_judge_events(events, _Subject(None, where, None), config))
    return findings


def occurrences(events: Sequence[XidEvent]) -> int:
    """How many times an XID happened: the largest count reported by any one source."""
    return max(Counter(event.source for event in events).values(), default=0)


def _assign_events(snapshot: NodeSnapshot) -> tuple[list[list[XidEvent]], dict[str, list[XidEvent]]]:
    """Each GPU's events, plus unattributed events that resolve to a listed GPU; the rest by PCI address."""
    per_gpu = [list(gpu.xid_events) for gpu in snapshot.gpus]
    orphans: dict[str, list[XidEvent]] = {}
    for event in snapshot.unattributed_xid_events:
        position = snapshot.owner_of(event)
        if position is not None:
            per_gpu[position].append(event)
            continue
        orphans.setdefault(_orphan_label(event), []).append(event)
    return per_gpu, orphans


def _orphan_label(event: XidEvent) -> str:
    """How a message names the GPU of an event no listed GPU owns: by PCI address, else by UUID."""
    if event.pci_bus_id is not None:
        address = pci_key(event.pci_bus_id) or " ".join(event.pci_bus_id.split())[:40]
        return f"PCI {address} (no listed GPU there)"
    if event.gpu_uuid is not None:
        return f"{' '.join(event.gpu_uuid.split())[:60]} (not listed)"
    return "a GPU of unknown address"


def _judge_events(events: Sequence[XidEvent], subject: _Subject, config: ChecksConfig) -> list[Finding]:
    by_code: dict[int, list[XidEvent]] = {}
    for event in events:
        by_code.setdefault(event.xid, []).append(event)
    codes_seen = frozenset(by_code)
    return [
        _finding(_Context(code, code_events, codes_seen, subject, config))
        for code, code_events in by_code.items()
    ]


def _finding(ctx: _Context) -> Finding:
    handler = _WORKFLOWS.get(ctx.code, _judge_by_catalogue)
    judgement = handler(ctx)
    action, detail = judgement.action, judgement.detail
    if ctx.code in ctx.config.xid.overrides:
        action = ctx.config.xid.overrides[ctx.code]
        detail = f"{detail}; overridden by configuration"
    entry = lookup(ctx.code)
    title = entry.description if entry is not None else "not in NVIDIA's catalogue"
    message = f"XID {ctx.code} ({title}) {ctx.count}x on {ctx.subject.where}: {detail} -> {action.value}"
    return Finding(
        check=CHECK,
        gpu=ctx.subject.gpu,
        status=status_for_action(action),
        code=f"XID_{ctx.code}",
        message=message,
        action=action,
    )


def _judge_by_catalogue(ctx: _Context) -> _Judgement:
    entry = lookup(ctx.code)
    if entry is None:
        return _Judgement(
            ctx.config.xid.unknown_action, "unknown XID, treated as contact-support level until classified"
        )
    return _Judgement(entry.action, f"NVIDIA bucket {entry.bucket.value}")


def _judge_48(ctx: _Context) -> _Judgement:
    partners = sorted(ctx.codes_seen & {63, 64})
    if partners:
        listed = " and ".join(f"XID {code}" for code in partners)
        return _Judgement(Action.DRAIN_AND_RESET, f"double-bit ECC error with {listed}: drain and reset")
    return _Judgement(Action.RESET_GPU, "double-bit ECC error alone: reset the GPU")


def _judge_45(ctx: _Context) -> _Judgement:
    others = sorted(ctx.codes_seen - {45, 154})
    if others:
        listed = ", ".join(str(code) for code in others)
        return _Judgement(Action.NONE, f"sympathetic to XID {listed}: follow those")
    return _Judgement(
        Action.NONE,
        "channels torn down after an app abort; if no abort explains it, restart nvidia-fabricmanager",
    )


def _judge_64(ctx: _Context) -> _Judgement:
    threshold = ctx.config.xid.xid64_repeat_threshold
    if ctx.count >= threshold:
        return _Judgement(
            ctx.config.xid.xid64_repeat_action,
            f"memory remap / retirement failed repeatedly (>= {threshold}): contact support",
        )
    return _Judgement(
        Action.RESET_GPU, "memory remap / retirement failed: reset, contact support if it repeats"
    )


def _judge_app_error(ctx: _Context) -> _Judgement:
    threshold = ctx.config.xid.app_error_repeat_threshold
    if ctx.count >= threshold:
        return _Judgement(
            ctx.config.xid.app_error_repeat_action,
            f"repeated on this GPU (>= {threshold}): run DCGM diagnostics (dcgmi diag -r 3), may be hardware",
        )
    return _Judgement(Action.RESTART_APP, "application fault: restart the application")


def _judge_74(ctx: _Context) -> _Judgement:
    entry_action = _catalogue_action(ctx.code)
    return _Judgement(
        entry_action,
        "NVLink error: reset the GPU; the peer GPU or NVSwitch on this link may be the faulty one",
    )


_NONFATAL = re.compile(r"\bnon-?fatal\b", re.IGNORECASE)
_FATAL = re.compile(r"\bfatal\b", re.IGNORECASE)


def _judge_nvlink5(ctx: _Context) -> _Judgement:
    """NVIDIA's decode sheet first (the error status decides); the severity word only where it is silent."""
    decoded = [decode(ctx.code, event.message) for event in ctx.events]
    if decoded and all(item is not None for item in decoded):
        known = [item for item in decoded if item is not None]
        worst = max(known, key=lambda item: item.resolution.rank)
        if worst.resolution is Resolution.RESET_GPU:
            return _Judgement(
                _catalogue_action(ctx.code), f"NVLink5 decode {worst.describe()}: reset the GPU"
            )
        if worst.resolution is Resolution.XID_154_EVAL:
            return _Judgement(Action.NONE, f"NVLink5 decode {worst.describe()}: act on the XID 154 it raises")
        return _Judgement(Action.NONE, f"NVLink5 decode {worst.describe()}")
    severities = [_nvlink5_severity(event.message) for event in ctx.events]
    if all(severity == "nonfatal" for severity in severities):
        return _Judgement(Action.NONE, "non-fatal NVLink5 event")
    if "fatal" in severities:
        return _Judgement(_catalogue_action(ctx.code), "fatal NVLink5 event: reset the GPU")
    return _Judgement(_catalogue_action(ctx.code), "NVLink5 event of unstated severity: reset the GPU")


def _nvlink5_severity(message: str | None) -> str | None:
    if message is None:
        return None
    if _NONFATAL.search(message):
        return "nonfatal"
    if _FATAL.search(message):
        return "fatal"
    return None


def _judge_154(ctx: _Context) -> _Judgement:
    for event in reversed(ctx.events):  # newest last: the latest change is the one that holds
        stated = recovery_action_from_message(event.message, ctx.config)
        if stated is not None:
            return _Judgement(stated[0], f"recovery action changed to {stated[1]}")
    field = ctx.subject.recovery_field
    field_action = action_for_value(field, ctx.config) if field is not None else None
    if field is not None and field_action is not None:
        return _Judgement(field_action, f"NVML recovery action field {field} ({value_name(field)})")
    return _Judgement(_catalogue_action(ctx.code), "recovery action not stated: reset the GPU")


def recovery_action_from_message(message: str | None, config: ChecksConfig) -> tuple[Action, str] | None:
    """The action an XID 154 message states, with how it stated it; None when it states none we know.

    The driver writes ``GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)``; the
    hex value is authoritative (names vary between drivers: ``OS Reboot``, ``PF FLR``), the name in
    parentheses is the fallback for values the table does not know (:func:`recovery_change_from_message`).
    """
    change = recovery_change_from_message(message)
    if change is None:
        return None
    if change.value is not None:
        mapped = action_for_value(change.value, config)
        if mapped is not None:
            return mapped, f"0x{change.value:x} ({change.name or value_name(change.value)})"
    by_name = change.value_by_name
    mapped = action_for_value(by_name, config) if by_name is not None else None
    if mapped is not None:
        return mapped, f"'{change.name}'"
    return None


def _catalogue_action(code: int) -> Action:
    entry = lookup(code)
    if entry is None:  # the workflow codes are all catalogued; this guards against a table edit
        raise KeyError(f"XID {code} has a workflow but no catalogue row")
    return entry.action


_WORKFLOWS: dict[int, Callable[[_Context], _Judgement]] = {
    13: _judge_app_error,
    31: _judge_app_error,
    45: _judge_45,
    48: _judge_48,
    64: _judge_64,
    74: _judge_74,
    154: _judge_154,
    **dict.fromkeys(range(144, 151), _judge_nvlink5),
}


def rejudge(finding: Finding, config: ChecksConfig) -> Finding:
    """A recorded XID finding under another configuration's ``xid.overrides`` (the replay of a candidate
    policy): the same override rule as a live judgement; any other finding is returned as it is."""
    match = re.fullmatch(r"XID_(\d+)", finding.code)
    if finding.check != CHECK or match is None or int(match.group(1)) not in config.xid.overrides:
        return finding
    action = config.xid.overrides[int(match.group(1))]
    return finding.model_copy(update={"action": action, "status": status_for_action(action)})
