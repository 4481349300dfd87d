"""Behaviour profiles: what gpuhealth does, per node group (docs/turning-on-safely.md).

A profile is named and has a **mode**, the ladder an operator climbs one node group at a time:

* ``observe`` — judge and report only: nothing is written to the orchestrator.
* ``mark`` — the ``GPUHealthy`` condition, the state label, Events (Nomad: the node metadata).
* ``quarantine`` — mark, taint ``gpuhealth.io/unhealthy`` and cordon (Nomad: ineligible).
* ``drain`` — quarantine, then drain and requeue with a permit from the aggregator.
* ``remediate`` — drain, then GPU reset / node reboot, validation and release.

A profile may also override check settings (``checks``: any key of the ``checks:`` section), XID actions
(``xid_actions``: XID -> action, merged into ``checks.xid.overrides``), debounce (``debounce``), any other
remediation policy key (``policy``), and a share of the fleet budget (``budget_share_percent``: the nodes of
the profile may hold at most that percent of the fleet's permits). ``shadow: true`` makes every decision of
the mode and records it ("would have drained ...") while writing only what ``shadow_writes`` (a mode, default
``observe``) allows.

A profile is chosen per node by ``match``: Kubernetes node labels, Nomad node pool, node class and metadata;
every key given must match. Two profiles must never both match a node: at load, each pair must set one key
to different values (so no node can match both), else the settings are refused with one line. A node that
matches no profile gets ``default`` (a profile name), or the base settings, named ``default``.

This module is the one place that turns a profile into the per-node values: ``resolve`` gives the checks,
debounce and policy the agent runs, the replay replays, and ``budget_share`` the aggregator's permits read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, model_validator

from checks.config import ChecksConfig
from core.debounce import DebounceConfig
from core.findings import Action
from core.settings import SettingsError, SettingsSection
from remediation.plan.planner import RemediationPolicy

Mode = Literal["observe", "mark", "quarantine", "drain", "remediate"]
_M = TypeVar("_M", ChecksConfig, DebounceConfig, RemediationPolicy)
PROFILE_LABEL = "gpuhealth.io/profile"
"""The report label that names the node's profile (the aggregator, the CLI and the fleet page read it)."""
DEFAULT_PROFILE = "default"
"""The name shown for a node that no profile selects (the base settings apply)."""

_MODE_POLICY: dict[Mode, dict[str, bool]] = {
    "observe": {"mark": False, "taint": False, "cordon": False, "events": False, "drain": False},
    "mark": {"mark": True, "taint": False, "cordon": False, "events": True, "drain": False},
    "quarantine": {"mark": True, "taint": True, "cordon": True, "events": True, "drain": False},
    "drain": {"mark": True, "taint": True, "cordon": True, "events": True, "drain": True},
    "remediate": {"mark": True, "taint": True, "cordon": True, "events": True, "drain": True},
}


class ProfileMatch(SettingsSection):
    """Which nodes a profile selects; every key given must match (an empty match selects no node)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Kubernetes node labels, all equal.")
    node_pool: str | None = Field(default=None, description="Nomad node pool.")
    node_class: str | None = Field(default=None, description="Nomad node class.")
    meta: dict[str, str] = Field(default_factory=dict, description="Nomad node metadata, all equal.")

    def keys(self) -> dict[str, str]:
        """The constraints as one flat mapping (``label:k``, ``pool``, ``class``, ``meta:k``)."""
        flat = {f"label:{k}": v for k, v in self.labels.items()}
        flat |= {f"meta:{k}": v for k, v in self.meta.items()}
        if self.node_pool is not None:
            flat["pool"] = self.node_pool
        if self.node_class is not None:
            flat["class"] = self.node_class
        return flat


class NodeGroup(ProfileMatch):
    """What a node is, for choosing its profile: its labels (Kubernetes: read from the Node when none are
    given), its pool, class and metadata (Nomad: the job passes ``${node.pool}``, ``${node.class}``)."""


class Profile(SettingsSection):
    """One behaviour profile (unknown keys, here and in every override, are refused at load)."""

    mode: Mode = Field(description="observe, mark, quarantine, drain or remediate.")
    match: ProfileMatch = Field(default_factory=ProfileMatch, description="The nodes it selects.")
    shadow: bool = Field(
        default=False, description="Decide as the mode says, record it, write only what shadow_writes allows."
    )
    shadow_writes: Mode = Field(
        default="observe", description="In shadow: the mode whose writes really happen (observe: none)."
    )
    checks: dict[str, Any] = Field(
        default_factory=dict, description="Check settings over the base checks: section (same keys)."
    )
    xid_actions: dict[int, Action] = Field(
        default_factory=dict, description="XID -> action, over checks.xid.overrides."
    )
    debounce: dict[str, Any] = Field(
        default_factory=dict, description="Debounce settings over the base debounce: section (same keys)."
    )
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description="Remediation policy keys over the mode's (drain_deadline_s, taint_effect, ...).",
    )
    budget_share_percent: float | None = Field(
        default=None, gt=0, le=100, description="Most of the fleet's permit budget this group may hold."
    )


class ProfilesSettings(SettingsSection):
    """The named profiles and how a node picks one (shared by the agent, the aggregator and the replay)."""

    definitions: dict[str, Profile] = Field(
        default_factory=dict, description="Profile name -> profile; empty: every node runs the base settings."
    )
    default: str | None = Field(
        default=None, description="Profile of a node no profile matches; none: the base settings."
    )
    shadow_all: bool = Field(
        default=False, description="Run the whole fleet in shadow (every profile, and the base settings)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> ProfilesSettings:
        if self.default is not None and self.default not in self.definitions:
            raise ValueError(f"profiles.default names an unknown profile '{self.default}'")
        names = sorted(self.definitions)
        for index, first in enumerate(names):
            if not self.definitions[first].match.keys() and first != self.default:
                raise ValueError(f"profile '{first}' has an empty match: it would select no node")
            for second in names[index + 1 :]:
                if _may_overlap(self.definitions[first].match, self.definitions[second].match):
                    raise ValueError(
                        f"profiles '{first}' and '{second}' can select the same node: give them one "
                        "label, pool, class or metadata key with different values"
                    )
        return self


def _may_overlap(first: ProfileMatch, second: ProfileMatch) -> bool:
    a, b = first.keys(), second.keys()
    if not a or not b:
        return False  # an empty match selects nothing (it can only be the default)
    if not _orchestrators(a) & _orchestrators(b):
        return False  # labels are Kubernetes', pool / class / metadata Nomad's: a node has one orchestrator
    return not any(key in b and b[key] != value for key, value in a.items())


def _orchestrators(keys: dict[str, str]) -> set[str]:
    return {"kubernetes" if key.startswith("label:") else "nomad" for key in keys}


@dataclass(frozen=True)
class ResolvedProfile:
    """A node's profile turned into the values the agent, the replay and the aggregator run with."""

    name: str
    mode: Mode | None  # None: the base settings (no profile)
    checks: ChecksConfig
    debounce: DebounceConfig
    policy: RemediationPolicy
    recovery: bool | None  # None: as the base recovery settings say; else the mode's (remediate only)
    shadow: bool
    acting_policy: RemediationPolicy  # what is really written (== policy unless shadow)
    acting_recovery: bool  # in shadow: whether resets and reboots are really done
    budget_share_percent: float | None


def select(profiles: ProfilesSettings, group: NodeGroup) -> str | None:
    """The name of the profile that selects this node (or ``profiles.default``); raises SettingsError when
    two match (only possible when the settings bypassed their validation)."""
    facts = group.keys()
    matching = [
        name
        for name, profile in sorted(profiles.definitions.items())
        if (wanted := profile.match.keys()) and all(facts.get(k) == v for k, v in wanted.items())
    ]
    if len(matching) > 1:
        raise SettingsError(f"node matches profiles {', '.join(matching)}: a node must match at most one")
    return matching[0] if matching else profiles.default


def resolve(
    profiles: ProfilesSettings,
    name: str | None,
    *,
    checks: ChecksConfig,
    debounce: DebounceConfig,
    policy: RemediationPolicy,
) -> ResolvedProfile:
    """The values of profile ``name`` over the base settings; raises SettingsError naming the bad key."""
    if name is None:
        acting = _mode_policy(policy, "observe") if profiles.shadow_all else policy
        return ResolvedProfile(
            DEFAULT_PROFILE, None, checks, debounce, policy, None, profiles.shadow_all, acting, False, None
        )
    profile = profiles.definitions.get(name)
    if profile is None:
        raise SettingsError(f"profiles: unknown profile '{name}'")
    where = f"profiles.definitions.{name}"
    checks_data = _merge(checks.model_dump(mode="json"), profile.checks)
    if profile.xid_actions:
        xid = dict(checks_data.get("xid") or {})
        xid["overrides"] = {
            **xid.get("overrides", {}),
            **{str(k): v.value for k, v in profile.xid_actions.items()},
        }
        checks_data["xid"] = xid
    resolved_checks = _validated(ChecksConfig, checks_data, f"{where}.checks")
    resolved_debounce = _validated(
        DebounceConfig, _merge(debounce.model_dump(mode="json"), profile.debounce), f"{where}.debounce"
    )
    mode_policy = _mode_policy(policy, profile.mode)
    resolved_policy = _validated(
        RemediationPolicy, _merge(mode_policy.model_dump(mode="json"), profile.policy), f"{where}.policy"
    )
    shadow = profile.shadow or profiles.shadow_all
    acting = _mode_policy(resolved_policy, profile.shadow_writes if profile.shadow else "observe")
    if profiles.shadow_all and not profile.shadow:
        acting = _mode_policy(resolved_policy, "observe")
    return ResolvedProfile(
        name=name,
        mode=profile.mode,
        checks=resolved_checks,
        debounce=resolved_debounce,
        policy=resolved_policy,
        recovery=profile.mode == "remediate",
        shadow=shadow,
        acting_policy=acting if shadow else resolved_policy,
        acting_recovery=profile.shadow_writes == "remediate" if shadow else profile.mode == "remediate",
        budget_share_percent=profile.budget_share_percent,
    )


def validate_all(
    profiles: ProfilesSettings, *, checks: ChecksConfig, debounce: DebounceConfig, policy: RemediationPolicy
) -> None:
    """Resolve every profile once, so a bad key in any of them is refused at load (one line)."""
    for name in sorted(profiles.definitions):
        resolve(profiles, name, checks=checks, debounce=debounce, policy=policy)


def budget_share(profiles: ProfilesSettings, name: str | None) -> float | None:
    """The profile's share of the fleet budget, in percent (None: no share of its own)."""
    profile = profiles.definitions.get(name) if name else None
    return profile.budget_share_percent if profile is not None else None


def _mode_policy(policy: RemediationPolicy, mode: Mode) -> RemediationPolicy:
    return policy.model_copy(update=_MODE_POLICY[mode])


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validated(model: type[_M], data: dict[str, Any], where: str) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        message = " ".join(str(first["msg"]).split())
        raise SettingsError(f"{where}.{field}: {message}") from None
