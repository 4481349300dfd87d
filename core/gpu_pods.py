"""Which pods hold which GPU on one node: the value a partial drain selects pods by.

It is read on the node (the kubelet's PodResources API) or from the API server (DRA ResourceClaims) and is a
plain, JSON-ready value, so whoever runs the drain (the agent today, a central component tomorrow) can be
handed it instead of reading it from deep inside the drain. docs/gpu-quarantine.md says where each source
comes from and when the drain falls back to the whole node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GpuPodSource = Literal["podresources", "dra-claims"]
DraKey = tuple[str, str, str]
"""A DRA device: (driver, pool, device)."""


class PodRef(BaseModel):
    """One pod, by namespace and name (PodResources knows no uid)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    name: str

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


class GpuPodMap(BaseModel):
    """The pods bound to each GPU of one node, by GPU UUID; a GPU no pod holds is absent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    source: GpuPodSource = Field(description="Where the mapping was read.")
    gpus: dict[str, list[PodRef]] = Field(default_factory=dict, description="GPU UUID -> pods holding it.")

    def pods_on(self, gpus: Iterable[str]) -> frozenset[str]:
        """The ``namespace/name`` keys of the pods that hold any of ``gpus``."""
        return frozenset(pod.key for uuid in gpus for pod in self.gpus.get(uuid, ()))


def build_map(node: str, source: GpuPodSource, bindings: Iterable[tuple[str, PodRef]]) -> GpuPodMap:
    """A map from ``(gpu uuid, pod)`` pairs; each pod listed once per GPU, in name order."""
    by_gpu: dict[str, set[PodRef]] = {}
    for uuid, pod in bindings:
        by_gpu.setdefault(uuid, set()).add(pod)
    ordered = {uuid: sorted(pods, key=lambda pod: pod.key) for uuid, pods in sorted(by_gpu.items())}
    return GpuPodMap(node=node, source=source, gpus=ordered)


class GpuPodMapError(RuntimeError):
    """The mapping could not be read (no socket, a refused or failed call, ids that name no known GPU)."""
