"""What a drain does with each pod on the node: the policy (settings) and the pure per-pod decision.

The decision follows ``kubectl drain`` (docs/drain.md, "Steps"): mirror pods and
DaemonSet-owned pods are skipped (their controllers would put them straight back), and so is the agent itself;
pods with ``emptyDir`` data and pods with no controller are refused unless the policy says otherwise
(``delete_emptydir_data`` / ``force``, kubectl's flags), because evicting them loses data or the pod for good.
Finished pods hold nothing and are evicted whatever they carry, as kubectl does.

Pods whose workload kind has requeue mode ``off`` are skipped as well, when the caller names them.

On top of that, a mode per namespace or label selector says *when* a pod is evicted: at once, after its Job
pod had the chance to finish, or after a fixed wait that gives a training job time to checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

JsonObject = dict[str, Any]


class DrainMode(StrEnum):
    """When a pod that may be evicted is evicted."""

    IMMEDIATE = "immediate"
    ALLOW_COMPLETION = "allow-completion"
    DELETE_AFTER_TIMEOUT = "delete-after-timeout"


class ModeRule(BaseModel):
    """A mode for the pods one namespace and/or label selector picks; the first matching rule wins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str | None = Field(default=None, description="Pods of this namespace only; None: any.")
    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Pods carrying all these labels; empty: any."
    )
    mode: DrainMode = Field(description="What to do with the pods this rule picks.")
    timeout_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "allow-completion: longest wait for a Job pod to finish before it is evicted; "
            "delete-after-timeout: the wait before eviction (checkpoint time). Ignored for immediate."
        ),
    )

    def matches(self, pod: Mapping[str, Any]) -> bool:
        """Whether this rule picks ``pod``."""
        metadata = pod.get("metadata") or {}
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        labels = metadata.get("labels") or {}
        return all(labels.get(key) == value for key, value in self.match_labels.items())


class DrainPolicy(BaseModel):
    """How gpuhealth drains a node; the defaults are ``kubectl drain --ignore-daemonsets``'s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    delete_emptydir_data: bool = Field(
        default=False, description="Evict pods with emptyDir volumes (their data is lost); else refuse."
    )
    force: bool = Field(
        default=False, description="Evict pods no controller owns (nothing recreates them); else refuse."
    )
    agent_namespace: str = Field(default="gpuhealth", description="Namespace of the agent's own pods.")
    agent_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "gpuhealth"},
        description="Labels of the agent's own pods (in agent_namespace), which are never evicted.",
    )
    modes: tuple[ModeRule, ...] = Field(
        default=(), description="Per namespace/label modes, first match wins."
    )
    default_mode: DrainMode = Field(default=DrainMode.IMMEDIATE, description="Mode when no rule matches.")
    default_timeout_s: float = Field(default=0.0, ge=0, description="timeout_s of the default mode.")
    max_in_flight: int = Field(default=16, ge=1, le=256, description="Most pods being evicted at once.")
    grace_period_s: int | None = Field(
        default=None, ge=0, description="Grace period sent with each eviction; None: the pod's own."
    )
    pod_timeout_s: float = Field(
        default=300.0, gt=0, description="Most time one pod may take from its eviction to being gone."
    )
    retry_initial_s: float = Field(
        default=1.0, ge=0, description="First wait after a refused (429) eviction; doubles, with jitter."
    )
    retry_max_s: float = Field(default=5.0, ge=0, description="Longest wait between two eviction attempts.")
    poll_interval_s: float = Field(
        default=1.0, gt=0, description="How often the node's pod list is read while waiting for pods to go."
    )
    summary_interval_s: float = Field(
        default=10.0, gt=0, description="How often a progress summary is logged while the drain runs."
    )

    def mode_for(self, pod: Mapping[str, Any]) -> tuple[DrainMode, float]:
        """The mode and its timeout for ``pod``."""
        for rule in self.modes:
            if rule.matches(pod):
                return rule.mode, rule.timeout_s
        return self.default_mode, self.default_timeout_s

    def is_agent(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` is one of gpuhealth's own agent pods."""
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != self.agent_namespace or not self.agent_labels:
            return False
        labels = metadata.get("labels") or {}
        return all(labels.get(key) == value for key, value in self.agent_labels.items())


class Verdict(StrEnum):
    """What the drain does with one pod."""

    EVICT = "evict"
    SKIP = "skip"
    REFUSE = "refuse"
    WAIT = "wait"  # already terminating: nothing to send, only wait for it to go


@dataclass(frozen=True)
class PodDecision:
    """The verdict for one pod, why, and (for EVICT) its mode."""

    verdict: Verdict
    reason: str
    mode: DrainMode = DrainMode.IMMEDIATE
    timeout_s: float = 0.0


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's controller ownerReference, if any."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None


def has_emptydir(pod: Mapping[str, Any]) -> bool:
    """Whether the pod mounts an emptyDir volume (local data lost on eviction)."""
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def _left_alone(pod: Mapping[str, Any], policy: DrainPolicy) -> PodDecision | None:
    """Pods the drain does not evict whatever the policy: mirror, DaemonSet, agent, already terminating."""
    metadata = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (metadata.get("annotations") or {}):
        return PodDecision(Verdict.SKIP, "mirror pod (static pod of the kubelet)")
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return PodDecision(Verdict.SKIP, f"DaemonSet-managed ({owner.get('name')})")
    if policy.is_agent(pod):
        return PodDecision(Verdict.SKIP, "the gpuhealth agent itself")
    if metadata.get("deletionTimestamp"):
        return PodDecision(Verdict.WAIT, "already terminating")
    return None


def decide(pod: Mapping[str, Any], policy: DrainPolicy, *, kept: str | None = None) -> PodDecision:
    """kubectl drain's filters, in its order, then the policy's mode for the pods that remain.

    ``kept`` is why the caller keeps the pod on the node (its workload kind's requeue mode is ``off``): such
    a pod is skipped, not refused, so it neither blocks the drain nor is evicted with the others.
    """
    left_alone = _left_alone(pod, policy)
    if left_alone is not None:
        return left_alone
    if kept is not None:
        return PodDecision(Verdict.SKIP, kept)
    owner = controller_of(pod)
    mode, timeout_s = policy.mode_for(pod)
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return PodDecision(Verdict.EVICT, "finished", DrainMode.IMMEDIATE)
    if has_emptydir(pod) and not policy.delete_emptydir_data:
        return PodDecision(Verdict.REFUSE, "has emptyDir data (set delete_emptydir_data to evict it)")
    if owner is None and not policy.force:
        return PodDecision(Verdict.REFUSE, "no controller would recreate it (set force to evict it)")
    return PodDecision(Verdict.EVICT, "evictable", mode, timeout_s)


def is_job_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a Job owns the pod (a batch pod that may finish on its own)."""
    owner = controller_of(pod)
    return owner is not None and owner.get("kind") == "Job"
