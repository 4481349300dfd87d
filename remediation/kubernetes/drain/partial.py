"""The partial drain: which of the node's pods a drain limited to some GPUs leaves on the node.

The drain (``drain.Drainer``) asks ``keep`` once, with the node's pods, for the pods to leave; this module
answers from a :class:`~core.gpu_pods.GpuPodMap` read when the drain starts. A pod stays unless
the map binds it to one of the faulty GPUs, so pods without any GPU (a node's agents, CPU services) stay too.
When the map cannot be read, the drain is the whole node's, cordon included, and says why: an eviction of
the wrong pods, or none at all of the right one, would be worse than a whole-node drain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from core.gpu_pods import DraKey, GpuPodMap, GpuPodMapError
from remediation.kubernetes.rest import JsonObject

log = structlog.get_logger(__name__)

GpuPodReader = Callable[[Mapping[DraKey, str]], GpuPodMap]
"""Reads the node's GPU-to-pod mapping now, given the node's DRA GPUs ((driver, pool, device) -> UUID, empty
without DRA); raises ``GpuPodMapError`` when it cannot."""

KEPT_REASON = "partial drain: not on a faulty GPU"


@dataclass(frozen=True)
class DrainScope:
    """What one drain evicts: the pods on ``gpus`` (``pod_map`` read), or the whole node."""

    gpus: tuple[str, ...] = ()
    pod_map: GpuPodMap | None = None
    fallback: str | None = None  # why a drain asked for some GPUs drains the whole node

    @property
    def partial(self) -> bool:
        """True when only the pods on the faulty GPUs go (and the node is not cordoned)."""
        return bool(self.gpus) and self.pod_map is not None

    def kept(self, pods: Sequence[JsonObject]) -> Mapping[str, str]:
        """The uids of the pods a partial drain leaves on the node, each with why (none when not partial)."""
        if self.pod_map is None or not self.gpus:
            return {}
        leaving = self.pod_map.pods_on(self.gpus)
        kept: dict[str, str] = {}
        for pod in pods:
            metadata = pod.get("metadata") or {}
            if f"{metadata.get('namespace', '')}/{metadata.get('name', '')}" not in leaving:
                kept[str(metadata.get("uid", ""))] = KEPT_REASON
        return kept

    def describe(self) -> str:
        """A few words for the timeline: which drain this was."""
        if self.pod_map is not None and self.gpus:
            return f"partial drain of GPUs {', '.join(self.gpus)} (from {self.pod_map.source})"
        if self.fallback:
            return f"whole-node drain ({self.fallback})"
        return "whole-node drain"


def scope_for(gpus: Sequence[str], sources: Sequence[Callable[[], GpuPodMap]]) -> DrainScope:
    """The scope of a drain asked for ``gpus`` (empty: the whole node): the first source that reads the
    mapping decides; when none does, the whole node, with every source's reason."""
    if not gpus:
        return DrainScope()
    wanted = tuple(gpus)
    if not sources:
        return DrainScope(wanted, fallback="no GPU-to-pod mapping configured")
    reasons: list[str] = []
    for read in sources:
        try:
            return DrainScope(wanted, pod_map=read())
        except GpuPodMapError as error:
            log.warning("gpu_pod_map_unreadable", error=str(error), gpus=list(wanted))
            reasons.append(str(error))
    return DrainScope(wanted, fallback=f"GPU-to-pod mapping unreadable: {'; '.join(reasons)}")
