"""PodResources answers turned into the GPU-to-pod map: the device plugin's ids (UUIDs, indices, time-sliced
replicas), DRA devices through the node's published GPUs, and the ids that make the map unusable (so the
drain falls back to the whole node). The client itself is exercised over real gRPC in
tests/kube/test_partial_drain.py; here one call goes to a socket nobody serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.backends.podresources import (
    ContainerDevices,
    PodDevices,
    PodResourcesClient,
    WireError,
    decode_list_response,
    gpu_pod_map,
)
from core.gpu_pods import GpuPodMapError

NODE = "gpu-node-0"


def pod(name: str, resource: str = "nvidia.com/gpu", *ids: str) -> PodDevices:
    return PodDevices("default", name, (ContainerDevices(resource, ids),))


def test_uuids_indices_and_replicas_resolve_to_gpu_uuids() -> None:
    pods = [
        pod("a", "nvidia.com/gpu", "GPU-aaa"),
        pod("b", "nvidia.com/gpu", "1"),
        pod("c", "nvidia.com/gpu", "GPU-aaa::2"),
    ]

    mapped = gpu_pod_map(NODE, pods, dra_devices={}, uuids_by_index=lambda: {1: "GPU-bbb"})

    assert mapped.pods_on(["GPU-aaa"]) == {"default/a", "default/c"}
    assert mapped.pods_on(["GPU-bbb"]) == {"default/b"}


def test_dra_devices_resolve_through_the_published_gpus_and_other_drivers_are_ignored() -> None:
    pods = [
        PodDevices(
            "ml", "llm", dra_devices=(("gpu.nvidia.com", NODE, "gpu-3"), ("nic.example.com", NODE, "eth1"))
        )
    ]

    mapped = gpu_pod_map(NODE, pods, dra_devices={("gpu.nvidia.com", NODE, "gpu-3"): "GPU-ccc"})

    assert mapped.gpus == {"GPU-ccc": [mapped.gpus["GPU-ccc"][0]]}
    assert mapped.pods_on(["GPU-ccc"]) == {"ml/llm"}


@pytest.mark.parametrize(
    "pods",
    [
        [pod("mig", "nvidia.com/mig-1g.10gb", "MIG-0f0f")],  # a MIG slice: which GPU is not said
        [pod("idx", "nvidia.com/gpu", "4")],  # an index with no GPU list to place it
        [PodDevices("ml", "x", dra_devices=(("gpu.nvidia.com", NODE, "gpu-9"),))],  # not published
    ],
)
def test_an_id_that_names_no_known_gpu_makes_the_map_unusable(pods: list[PodDevices]) -> None:
    dra = {("gpu.nvidia.com", NODE, "gpu-0"): "GPU-ddd"}
    with pytest.raises(GpuPodMapError):
        gpu_pod_map(NODE, pods, dra_devices=dra)


def test_other_vendors_resources_are_not_gpus() -> None:
    assert gpu_pod_map(NODE, [pod("n", "example.com/nic", "eth0")], dra_devices={}).gpus == {}


def test_a_truncated_answer_is_a_wire_error() -> None:
    with pytest.raises(WireError):
        decode_list_response(b"\x0a\x05ab")


def test_a_socket_nobody_serves_is_a_mapping_error(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "none.sock"), timeout_s=1.0)
    with pytest.raises(GpuPodMapError, match="UNAVAILABLE"):
        client.list()
