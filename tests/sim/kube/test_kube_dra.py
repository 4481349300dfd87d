"""DRA through the emulator with the official client's ``ResourceV1Api``, as the real API server serves it
(https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/): ResourceSlices
(cluster-scoped, field selectors ``spec.nodeName``, ``spec.driver``, ``spec.pool.name``), DeviceTaintRules
(list, get, create, patch, delete, watch) and ResourceClaims with a status subresource."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from dra_slices import gpu_slice
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from waiting import HANG_GUARD_S

from sim.kube.harness import KubeSim


@pytest.fixture
def resource(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


def rule(name: str, device: str = "gpu-0") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": {"owner": "test"}},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": device},
            "taint": {"key": "example.com/bad", "value": "x", "effect": "NoSchedule"},
        },
    }


def test_resource_slices_select_by_node_driver_and_pool(resource: client.ResourceV1Api) -> None:
    resource.create_resource_slice(gpu_slice("node-a", ["GPU-a0", "GPU-a1"]))
    resource.create_resource_slice(gpu_slice("node-b", ["GPU-b0"]))
    other_driver = gpu_slice("node-a", ["NIC-0"], driver="nic.example.com")
    resource.create_resource_slice(other_driver)

    by_node = resource.list_resource_slice(field_selector="spec.nodeName=node-a,spec.driver=gpu.nvidia.com")
    by_pool = resource.list_resource_slice(field_selector="spec.pool.name=node-b")

    assert [s.spec.node_name for s in by_node.items] == ["node-a"]
    assert [d.name for d in by_node.items[0].spec.devices] == ["gpu-0", "gpu-1"]
    assert by_node.items[0].spec.devices[1].attributes["uuid"].string == "GPU-a1"
    assert [s.spec.pool.name for s in by_pool.items] == ["node-b"]
    with pytest.raises(ApiException) as refused:
        resource.list_resource_slice(field_selector="spec.devices=x")
    assert refused.value.status == 400


def test_device_taint_rules_list_get_patch_delete(resource: client.ResourceV1Api) -> None:
    resource.create_device_taint_rule(rule("r1"))
    resource.create_device_taint_rule(rule("r2", "gpu-1"))

    patched = resource.patch_device_taint_rule("r1", {"spec": {"taint": {"value": "y"}}})
    listed = resource.list_device_taint_rule(label_selector="owner=test")
    resource.delete_device_taint_rule("r2")

    assert patched.spec.taint.value == "y"
    assert sorted(str(r.metadata.name) for r in listed.items) == ["r1", "r2"]
    assert [r.metadata.name for r in resource.list_device_taint_rule().items] == ["r1"]
    with pytest.raises(ApiException) as missing:
        resource.read_device_taint_rule("r2")
    assert missing.value.status == 404


def test_device_taint_rules_are_watched(resource: client.ResourceV1Api, bare_kube_sim: KubeSim) -> None:
    start = resource.list_device_taint_rule().metadata.resource_version
    seen: list[tuple[str, str]] = []
    stream: Any = watch.Watch()

    def follow() -> None:
        for event in stream.stream(
            resource.list_device_taint_rule, resource_version=start, timeout_seconds=10
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                stream.stop()

    thread = threading.Thread(target=follow)
    thread.start()
    resource.create_device_taint_rule(rule("w1"))
    resource.delete_device_taint_rule("w1")
    thread.join(HANG_GUARD_S)

    assert seen == [("ADDED", "w1"), ("DELETED", "w1")]


def test_resource_claims_keep_their_allocation_in_the_status(
    resource: client.ResourceV1Api, bare_kube_sim: KubeSim
) -> None:
    """A create through the API starts without status; the scheduler's status write names the device."""
    bare_kube_sim.store.create("namespaces", {"metadata": {"name": "ml"}})
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "llm-gpu", "namespace": "ml"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "u"}]},
    }
    created = resource.create_namespaced_resource_claim("ml", claim)
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-3"}]
        }
    }
    status = {
        "status": {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": "llm-0", "uid": "u1"}],
        }
    }
    resource.patch_namespaced_resource_claim_status("llm-gpu", "ml", status)
    read = resource.read_namespaced_resource_claim("llm-gpu", "ml")

    assert created.status is None or not created.status.reserved_for
    assert read.status.allocation.devices.results[0].device == "gpu-3"
    assert [ref.name for ref in read.status.reserved_for] == ["llm-0"]
