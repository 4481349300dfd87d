"""DRA inventory as the NVIDIA DRA driver publishes it: one ResourceSlice per node, driver ``gpu.nvidia.com``,
pool = the node's name, one device ``gpu-<index>`` per GPU with the attributes ``uuid`` and ``index``
(https://github.com/NVIDIA/k8s-dra-driver-gpu; the Kubernetes shape in
https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/#resourceslice)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

KubeObject = dict[str, Any]

NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
RESOURCE_SLICES = "resourceslices.resource.k8s.io"


def gpu_slice(node: str, uuids: Sequence[str], *, driver: str = NVIDIA_DRA_DRIVER) -> KubeObject:
    """The ResourceSlice that lists ``uuids`` (in index order) as the devices of ``node``'s pool."""
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "uuid": {"string": uuid},
                "index": {"int": index},
                "type": {"string": "gpu"},
                "productName": {"string": "NVIDIA H200"},
            },
        }
        for index, uuid in enumerate(uuids)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-gpus"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
