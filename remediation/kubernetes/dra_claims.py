"""Which pod holds which GPU, from the API server: the pods' DRA ResourceClaims (the partial drain's second
source, when the kubelet's PodResources socket cannot be read).

A pod names its claims in ``status.resourceClaimStatuses`` (the generated claim of a template) and
``spec.resourceClaims`` (a claim named directly); each claim's ``status.allocation.devices.results`` lists
the devices the scheduler allocated (driver, pool, device), which the node's ResourceSlices map to GPU
UUIDs. Only a node whose GPUs are all DRA devices can be read this way: a pod that asks for an ``nvidia.com/``
extended resource holds a device-plugin GPU the claims do not name, so the map would be incomplete and the
drain falls back to the whole node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from core.gpu_pods import DraKey, GpuPodMap, GpuPodMapError, PodRef, build_map
from remediation.kubernetes.rest import JsonObject, RestClient

CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
NVIDIA_RESOURCE_PREFIX = "nvidia.com/"


def claims_gpu_pod_map(
    rest: RestClient, node: str, pods: Sequence[JsonObject], dra_devices: Mapping[DraKey, str]
) -> GpuPodMap:
    """The GPU-to-pod map of ``pods`` (the node's) from their claims; raises ``GpuPodMapError`` when the
    node has no DRA GPUs, a pod holds a device-plugin GPU, or a claim cannot be read."""
    if not dra_devices:
        raise GpuPodMapError("the node publishes no DRA GPUs: its pods' claims cannot name them")
    drivers = {driver for driver, _pool, _device in dra_devices}
    bindings: list[tuple[str, PodRef]] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        ref = PodRef(namespace=str(metadata.get("namespace", "")), name=str(metadata.get("name", "")))
        if _extended_gpus(pod):
            raise GpuPodMapError(f"pod {ref.key} holds a device-plugin GPU, which no claim names")
        for claim in _claim_names(pod):
            for key in _allocated(rest, ref.namespace, claim):
                if key[0] not in drivers:
                    continue  # another driver's device (a NIC ...)
                uuid = dra_devices.get(key)
                if uuid is None:
                    raise GpuPodMapError(
                        f"DRA device {'/'.join(key)} is not among this node's published GPUs"
                    )
                bindings.append((uuid, ref))
    return build_map(node, "dra-claims", bindings)


def _extended_gpus(pod: JsonObject) -> bool:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if any(str(name).startswith(NVIDIA_RESOURCE_PREFIX) for name in resources.get(section) or {}):
                return True
    return False


def _claim_names(pod: JsonObject) -> Iterator[str]:
    """The names of the pod's ResourceClaims: generated ones from the status, direct ones from the spec."""
    seen: set[str] = set()
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    direct = (pod.get("spec") or {}).get("resourceClaims") or []
    for name in [s.get("resourceClaimName") for s in statuses] + [c.get("resourceClaimName") for c in direct]:
        if name and name not in seen:
            seen.add(str(name))
            yield str(name)


def _allocated(rest: RestClient, namespace: str, name: str) -> list[DraKey]:
    try:
        claim = rest.json("GET", CLAIM_PATH, path_params={"namespace": namespace, "name": name})
    except Exception as error:
        raise GpuPodMapError(f"ResourceClaim {namespace}/{name} unreadable: {_one_line(error)}") from error
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))) for r in results]


def _one_line(error: BaseException) -> str:
    return f"HTTP {error.status}" if isinstance(error, ApiException) else type(error).__name__
