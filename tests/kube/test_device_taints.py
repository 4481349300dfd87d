"""Per-GPU quarantine through DRA DeviceTaintRules, as the Kubernetes executor applies it over HTTP.

The NVIDIA DRA driver's ResourceSlice (``sim.kube.dra``) names the node's GPUs; the executor reads it, and
``SetDeviceTaints`` / ``RemoveDeviceTaints`` write only our rules (the labels and name scheme of
``remediation/kubernetes/device_taints.py``), idempotently, leaving anyone else's rule alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dra_slices import RESOURCE_SLICES, gpu_slice
from kubernetes import client

from core.clock import ManualClock
from core.steps import RemoveDeviceTaints, SetDeviceTaints
from remediation.kubernetes.device_taints import rule_name
from remediation.kubernetes.executor import KubernetesExecutor
from sim.kube.harness import KubeSim

NODE = "gpu-node-0"
OTHER_NODE = "gpu-node-1"
UUIDS = [f"GPU-{index:08x}-0000-4000-8000-00000000000{index}" for index in range(8)]
RULES = "devicetaintrules.resource.k8s.io"


def publish_gpus(sim: KubeSim, node: str, uuids: list[str]) -> None:
    """The DRA driver's kubelet plugin publishing the node's GPUs."""
    sim.store.create(RESOURCE_SLICES, gpu_slice(node, uuids))


def dra_executor(make_executor: Callable[..., KubernetesExecutor], node: str = NODE) -> KubernetesExecutor:
    return make_executor(node, dra_driver="gpu.nvidia.com")


def rules(sim: KubeSim) -> dict[str, dict[str, Any]]:
    return {rule["metadata"]["name"]: rule for rule in sim.store.list(RULES)}


def test_facts_name_the_nodes_dra_gpus_and_no_taint_yet(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """Only this node's slice counts: the other node's GPUs are not ours to taint."""
    publish_gpus(sim, NODE, UUIDS)
    publish_gpus(sim, OTHER_NODE, ["GPU-other"])

    facts = dra_executor(make_executor).facts()

    assert facts.dra_gpus == tuple(sorted(UUIDS))
    assert facts.device_taint_gpus == ()
    assert facts.device_taint_value is None


def test_a_node_without_dra_devices_keeps_to_the_node_taint(
    make_executor: Callable[..., KubernetesExecutor],
) -> None:
    """No ResourceSlice of the driver: ``dra_gpus`` None, so the planner never plans device taints."""
    assert dra_executor(make_executor).facts().dra_gpus is None


def test_set_device_taints_writes_one_rule_selecting_the_device_and_is_idempotent(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """The rule selects driver, pool (the node) and device by name, with our key and the action as value;
    applying the same step again sends no write."""
    publish_gpus(sim, NODE, UUIDS)
    executor = dra_executor(make_executor)
    executor.facts()
    step = SetDeviceTaints(gpus=(UUIDS[3],), value="reset_gpu", effect="NoSchedule")

    first = executor.apply([step]).results[0]
    writes = executor.writes_total
    second = executor.apply([step]).results[0]

    assert first.ok, first.detail
    assert second.ok and second.detail == "unchanged"
    assert executor.writes_total == writes
    stored = rules(sim)
    assert list(stored) == [rule_name(NODE, "gpu-3")]
    spec = stored[rule_name(NODE, "gpu-3")]["spec"]
    assert spec["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-3"}
    assert spec["taint"] == {"key": "gpuhealth.io/unhealthy", "value": "reset_gpu", "effect": "NoSchedule"}
    facts = executor.facts()
    assert (facts.device_taint_gpus, facts.device_taint_value, facts.device_taint_effect) == (
        (UUIDS[3],),
        "reset_gpu",
        "NoSchedule",
    )


def test_the_real_client_reads_our_rule_back(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """What we write is a valid DeviceTaintRule for the official client's resource.k8s.io/v1 models."""
    publish_gpus(sim, NODE, UUIDS)
    executor = dra_executor(make_executor)
    executor.facts()
    assert (
        executor.apply([SetDeviceTaints(gpus=(UUIDS[1],), value="replace", effect="NoExecute")]).results[0].ok
    )

    api_client = sim.api_client()
    try:
        listed = client.ResourceV1Api(api_client).list_device_taint_rule(
            label_selector=f"gpuhealth.io/node={NODE}"
        )
    finally:
        api_client.close()

    assert [rule.to_dict()["spec"]["device_selector"]["device"] for rule in listed.items] == ["gpu-1"]
    assert listed.items[0].spec.taint.effect == "NoExecute"


def test_escalation_updates_the_rule_and_a_changed_set_deletes_the_old_one(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    publish_gpus(sim, NODE, UUIDS)
    executor = dra_executor(make_executor)
    executor.facts()
    executor.apply([SetDeviceTaints(gpus=(UUIDS[0], UUIDS[2]), value="reset_gpu")])

    result = executor.apply([SetDeviceTaints(gpus=(UUIDS[2],), value="replace")]).results[0]

    assert result.ok, result.detail
    stored = rules(sim)
    assert list(stored) == [rule_name(NODE, "gpu-2")]
    assert stored[rule_name(NODE, "gpu-2")]["spec"]["taint"]["value"] == "replace"


def test_remove_deletes_only_our_rules_of_this_node(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """A human's rule on the same device, and our rule of another node, stay."""
    publish_gpus(sim, NODE, UUIDS)
    publish_gpus(sim, OTHER_NODE, ["GPU-other"])
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance-gpu-3"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-3"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    sim.store.create(RULES, theirs)
    other = dra_executor(make_executor, OTHER_NODE)
    other.facts()
    other.apply([SetDeviceTaints(gpus=("GPU-other",), value="reset_gpu")])
    executor = dra_executor(make_executor)
    executor.facts()
    executor.apply([SetDeviceTaints(gpus=(UUIDS[3],), value="reset_gpu")])

    result = executor.apply([RemoveDeviceTaints()]).results[0]

    assert result.ok, result.detail
    assert sorted(rules(sim)) == sorted(["maintenance-gpu-3", rule_name(OTHER_NODE, "gpu-0")])
    assert executor.apply([RemoveDeviceTaints()]).results[0].detail == "unchanged"


def test_a_rule_a_human_deleted_comes_back_on_the_next_set(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor]
) -> None:
    """Writes read our rules fresh, so a deleted rule is created again rather than assumed present."""
    publish_gpus(sim, NODE, UUIDS)
    executor = dra_executor(make_executor)
    executor.facts()
    step = SetDeviceTaints(gpus=(UUIDS[5],), value="reset_gpu")
    executor.apply([step])
    sim.store.delete(RULES, None, rule_name(NODE, "gpu-5"))

    result = executor.apply([step]).results[0]

    assert result.detail == f"created {rule_name(NODE, 'gpu-5')}"
    assert list(rules(sim)) == [rule_name(NODE, "gpu-5")]


def test_inventory_is_read_again_only_after_the_resync_period(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor], clock: ManualClock
) -> None:
    """Facts come from a cache: a slice published later is seen once ``resync_s`` has passed."""
    executor = make_executor(NODE, dra_driver="gpu.nvidia.com", resync_s=300.0)
    assert executor.facts().dra_gpus is None
    publish_gpus(sim, NODE, UUIDS)
    requests = executor.requests_total

    assert executor.facts().dra_gpus is None
    assert executor.requests_total == requests
    clock.advance(300)
    assert executor.facts().dra_gpus == tuple(sorted(UUIDS))


def test_a_failed_write_falls_back_to_the_node_taint_until_the_next_read(
    sim: KubeSim, make_executor: Callable[..., KubernetesExecutor], clock: ManualClock
) -> None:
    """A write that keeps failing makes the inventory unknown (``dra_gpus`` None), so the planner puts the
    node taint on meanwhile; the next read after ``resync_s`` brings the devices back."""
    publish_gpus(sim, NODE, UUIDS)
    executor = dra_executor(make_executor)
    executor.facts()
    sim.faults.inject(verb="create", resource="devicetaintrules.resource.k8s.io", status=500, times=100)

    result = executor.apply([SetDeviceTaints(gpus=(UUIDS[4],), value="reset_gpu")]).results[0]

    assert not result.ok
    assert executor.facts().dra_gpus is None
    sim.faults.clear()
    clock.advance(300)
    assert executor.facts().dra_gpus == tuple(sorted(UUIDS))
