"""GPU-operator-shaped nodes and workload loading for the emulated cluster.

Node labels follow what NVIDIA GPU Feature Discovery and the GPU Operator put on a node
(``nvidia.com/gpu.present``, ``gpu.product``, ``gpu.count``, ``gpu.memory`` in MiB, ``gpu.family``,
``gpu.compute.major/minor``, ``cuda.driver.major/minor/rev``, ``cuda.runtime.major/minor``,
``mig.capable``, ``gpu.replicas``, ``gpu.sharing-strategy``, ``gpu.deploy.*``) next to the well-known
Kubernetes labels (``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``,
``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone``). Capacity and allocatable carry
``nvidia.com/gpu`` as the device plugin advertises it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from sim.kube.protocols import KubeObject, ObjectStore

__all__ = [
    "GPU_PRODUCTS",
    "GpuProduct",
    "WorkloadError",
    "build_fleet",
    "gpu_node",
    "load_workloads",
]


class WorkloadError(ValueError):
    """A workload document that cannot be loaded (bad YAML, unknown kind, missing name)."""


@dataclass(frozen=True)
class GpuProduct:
    """What GFD reports for one GPU model."""

    memory_mib: int
    family: str
    compute: tuple[int, int]
    instance_type: str


GPU_PROBE_DEFAULTS = {"driver": "550.54.15", "cuda_runtime": "12.4"}

GPU_PRODUCTS: dict[str, GpuProduct] = {
    "NVIDIA-H100-80GB-HBM3": GpuProduct(81559, "hopper", (9, 0), "p5.48xlarge"),
    "NVIDIA-H200": GpuProduct(143771, "hopper", (9, 0), "p5e.48xlarge"),
    "NVIDIA-A100-SXM4-80GB": GpuProduct(81920, "ampere", (8, 0), "p4de.24xlarge"),
    "NVIDIA-B200": GpuProduct(183359, "blackwell", (10, 0), "p6-b200.48xlarge"),
}
_FALLBACK_PRODUCT = GpuProduct(81559, "hopper", (9, 0), "gpu-8x")


def _address(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(digest[2], 1)}"


def _gfd_labels(product: str, gpus: int, driver: str, cuda_runtime: str) -> dict[str, str]:
    info = GPU_PRODUCTS.get(product, _FALLBACK_PRODUCT)
    driver_parts = ([*driver.split("."), "0", "0", "0"])[:3]
    runtime_parts = ([*cuda_runtime.split("."), "0", "0"])[:2]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(info.memory_mib),
        "nvidia.com/gpu.family": info.family,
        "nvidia.com/gpu.compute.major": str(info.compute[0]),
        "nvidia.com/gpu.compute.minor": str(info.compute[1]),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",  # every model listed here (A100, H100, H200, B200) supports MIG
        "nvidia.com/cuda.driver.major": driver_parts[0],
        "nvidia.com/cuda.driver.minor": driver_parts[1],
        "nvidia.com/cuda.driver.rev": driver_parts[2],
        "nvidia.com/cuda.runtime.major": runtime_parts[0],
        "nvidia.com/cuda.runtime.minor": runtime_parts[1],
    }
    for operand in (
        "driver",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "gpu-feature-discovery",
    ):
        labels[f"nvidia.com/gpu.deploy.{operand}"] = "true"
    return labels


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, Any]] = (),
    unschedulable: bool = False,
    ready: bool = True,
    zone: str = "zone-a",
    driver_version: str = GPU_PROBE_DEFAULTS["driver"],
    cuda_runtime: str = GPU_PROBE_DEFAULTS["cuda_runtime"],
    kubelet_version: str = "v1.31.4",
    heartbeat: str = "2026-01-01T00:00:00Z",
) -> KubeObject:
    """A Node as a GPU-operator-managed node with ``gpus`` GPUs of ``product`` reports itself."""
    info = GPU_PRODUCTS.get(product, _FALLBACK_PRODUCT)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": info.instance_type,
        "topology.kubernetes.io/zone": zone,
        **_gfd_labels(product, gpus, driver_version, cuda_runtime),
        **(labels or {}),
    }
    resources = {"cpu": "192", "memory": "2113639528Ki", "pods": "110", "ephemeral-storage": "7500000000Ki"}
    allocatable = {**resources, "cpu": "191500m", "memory": "2097862248Ki", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {"providerID": f"sim://{name}"}
    if taints:
        spec["taints"] = [dict(taint) for taint in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {
            "capacity": {**resources, "nvidia.com/gpu": str(gpus)},
            "allocatable": allocatable,
            "conditions": _node_conditions(ready, heartbeat),
            "addresses": [
                {"type": "InternalIP", "address": _address(name)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hashlib.md5(name.encode(), usedforsecurity=False).hexdigest(),
                "systemUUID": hashlib.md5(f"uuid-{name}".encode(), usedforsecurity=False).hexdigest(),
                "bootID": hashlib.md5(f"boot-{name}".encode(), usedforsecurity=False).hexdigest(),
                "kernelVersion": "5.15.0-1063-nvidia",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def _node_conditions(ready: bool, heartbeat: str) -> list[dict[str, Any]]:
    def entry(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": heartbeat,
        }

    return [
        entry(
            "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
        ),
        entry("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        entry("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        entry("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        if ready
        else entry("Ready", "False", "KubeletNotReady", "container runtime is down"),
    ]


def build_fleet(
    store: ObjectStore,
    nodes: int,
    *,
    prefix: str = "gpu-node-",
    gpus_per_node: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: Mapping[str, str] | None = None,
    zones: int = 3,
    start: int = 0,
) -> list[str]:
    """Create ``nodes`` GPU nodes named ``<prefix><n>`` (spread over ``zones`` zones); returns their names."""
    if nodes < 0:
        raise ValueError("a fleet needs a non-negative number of nodes")
    heartbeat = store.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    width = max(len(str(start + nodes - 1)), 1)
    names = []
    for number in range(start, start + nodes):
        name = f"{prefix}{number:0{width}d}" if width > 1 else f"{prefix}{number}"
        node = gpu_node(
            name,
            gpus=gpus_per_node,
            product=product,
            labels=labels,
            zone=f"zone-{chr(ord('a') + number % max(zones, 1))}",
            heartbeat=heartbeat,
        )
        store.create("nodes", node)
        names.append(name)
    return names


# --- workloads ---------------------------------------------------------------------------------------------

_BUILTIN_KINDS: dict[tuple[str, str], str] = {
    ("", "Namespace"): "namespaces",
    ("", "Node"): "nodes",
    ("", "Pod"): "pods",
    ("", "Service"): "services",
    ("", "ConfigMap"): "configmaps",
    ("", "Secret"): "secrets",
    ("", "ServiceAccount"): "serviceaccounts",
    ("", "Event"): "events",
    ("apps", "DaemonSet"): "daemonsets.apps",
    ("apps", "Deployment"): "deployments.apps",
    ("apps", "ReplicaSet"): "replicasets.apps",
    ("apps", "StatefulSet"): "statefulsets.apps",
    ("batch", "Job"): "jobs.batch",
    ("batch", "CronJob"): "cronjobs.batch",
    ("policy", "PodDisruptionBudget"): "poddisruptionbudgets.policy",
    ("coordination.k8s.io", "Lease"): "leases.coordination.k8s.io",
}


def _resource_for(store: ObjectStore, api_version: str, kind: str) -> str:
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    registry = getattr(store, "registry", None)
    for resource_type in getattr(registry, "types", None) or []:
        if resource_type.kind == kind and resource_type.group == group:
            return str(resource_type.key)
    key = _BUILTIN_KINDS.get((group, kind))
    if key is None:
        raise WorkloadError(f"unknown kind {kind} in {api_version or 'no apiVersion'}")
    return key


def _documents(yaml_text: str) -> list[KubeObject]:
    try:
        loaded = [doc for doc in yaml.safe_load_all(yaml_text) if doc is not None]
    except yaml.YAMLError as error:
        raise WorkloadError(f"workloads are not valid YAML: {error}".splitlines()[0]) from None
    documents: list[KubeObject] = []
    for doc in loaded:
        if not isinstance(doc, dict):
            raise WorkloadError("each YAML document must be a Kubernetes object (a mapping)")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            documents.extend(doc["items"])
        else:
            documents.append(doc)
    return documents


def load_workloads(store: ObjectStore, yaml_text: str) -> list[KubeObject]:
    """Create every object of a multi-document YAML text (``List`` kinds expanded), namespaces first."""
    documents = _documents(yaml_text)
    documents.sort(key=lambda doc: doc.get("kind") != "Namespace")  # stable: otherwise file order
    created = []
    for doc in documents:
        metadata = doc.get("metadata") or {}
        if not metadata.get("name") and not metadata.get("generateName"):
            raise WorkloadError(f"a {doc.get('kind')} document has no metadata.name")
        resource = _resource_for(store, str(doc.get("apiVersion") or ""), str(doc.get("kind") or ""))
        try:
            created.append(store.create(resource, doc))
        except LookupError as error:  # name taken, namespace missing, resource not served
            raise WorkloadError(f"cannot create {doc.get('kind')} {metadata.get('name')}: {error}") from None
    return created
