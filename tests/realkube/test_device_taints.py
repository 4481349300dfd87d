"""Per-GPU quarantine against a real kube-apiserver 1.37 (resource.k8s.io/v1 serves ResourceSlices and
DeviceTaintRules by default): the executor finds its node's DRA GPUs and writes, updates and removes our
DeviceTaintRule with the agent's own token, through the chart's RBAC and its admission policy
``gpuhealth-own-devices``, which refuses the same token a rule on another node's pool.

The agent's identity is a TokenRequest bound to a Pod on node A (as in test_least_privilege.py), so the API
server puts the node name into the request's user info, which the policy reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane import ControlPlane
from dra_slices import gpu_slice
from helm_render import AGENT_ACCOUNT, NAMESPACE, render
from kube_apply import apply_in_namespace
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from realkube import Cluster
from waiting import wait_until

from core.steps import RemoveDeviceTaints, SetDeviceTaints
from remediation.kubernetes.device_taints import rule_name
from remediation.kubernetes.executor import KubernetesExecutor

KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
VALUES = {"gpuQuarantine": {"deviceTaint": "instead"}}


@pytest.fixture(scope="module")
def policies(control_plane: ControlPlane) -> None:
    """The chart's identity, RBAC and admission objects with device taints on, applied server-side."""
    api_client = control_plane.api_client()
    try:
        apply_in_namespace(api_client, (o for o in render(VALUES) if o["kind"] in KINDS), NAMESPACE)
    finally:
        api_client.close()


class NodeAgent:
    """A pod of the agent's account on ``node`` and an API client with a token bound to it."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self.cluster = cluster
        self.node = node
        pod = cluster.core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"generateName": "gpuhealth-dra-"},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": AGENT_ACCOUNT,
                    "containers": [{"name": "agent", "image": "gpuhealth"}],
                },
            },
        )
        self.pod = str(pod.metadata.name)
        bound = {"kind": "Pod", "apiVersion": "v1", "name": self.pod, "uid": pod.metadata.uid}
        answer = cluster.core.create_namespaced_service_account_token(
            AGENT_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 3600, "boundObjectRef": bound}}
        )
        self.api_client = cluster.plane.api_client(token=str(answer.status.token))
        self.resource = client.ResourceV1Api(self.api_client)

    def close(self) -> None:
        self.api_client.close()
        self.cluster.core.delete_namespaced_pod(self.pod, NAMESPACE, grace_period_seconds=0)


@pytest.fixture
def slices(cluster: Cluster) -> Iterator[dict[str, list[str]]]:
    """Both nodes' GPUs published by the NVIDIA DRA driver (admin writes them, as the driver would)."""
    resource = client.ResourceV1Api(cluster.admin)
    uuids = {
        node: [f"GPU-{index:08x}-1111-4222-8333-{position:012x}" for position in range(8)]
        for index, node in enumerate(cluster.node_names)
    }
    for node, gpus in uuids.items():
        resource.create_resource_slice(gpu_slice(node, gpus))
    yield uuids
    for node in uuids:
        resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={node}")
    resource.delete_collection_device_taint_rule(label_selector="app.kubernetes.io/managed-by=gpuhealth")


@pytest.fixture
def agent(cluster: Cluster, policies: None) -> Iterator[NodeAgent]:
    made = NodeAgent(cluster, cluster.node_names[0])
    yield made
    made.close()


def test_the_agent_taints_its_own_gpu_and_removes_it_through_rbac_and_the_policy(
    agent: NodeAgent, cluster: Cluster, slices: dict[str, list[str]]
) -> None:
    """With the agent's token: the executor finds the node's eight DRA GPUs, writes the rule for GPU 3
    (validated by the real API server), raises its value, and deletes it on release."""
    executor = KubernetesExecutor(agent.api_client, agent.node, watch=False, dra_driver="gpu.nvidia.com")
    bad = slices[agent.node][3]
    try:
        assert executor.facts().dra_gpus == tuple(sorted(slices[agent.node]))
        first = executor.apply([SetDeviceTaints(gpus=(bad,), value="reset_gpu", effect="NoSchedule")])
        raised = executor.apply([SetDeviceTaints(gpus=(bad,), value="replace", effect="NoExecute")])
        assert [(r.ok, r.detail) for r in (*first.results, *raised.results)] == [
            (True, f"created {rule_name(agent.node, 'gpu-3')}"),
            (True, f"updated {rule_name(agent.node, 'gpu-3')}"),
        ]
        stored = client.ResourceV1Api(cluster.admin).read_device_taint_rule(rule_name(agent.node, "gpu-3"))
        selector = cluster.to_dict(stored.spec)["deviceSelector"]
        assert selector == {"driver": "gpu.nvidia.com", "pool": agent.node, "device": "gpu-3"}
        assert (stored.spec.taint.value, stored.spec.taint.effect) == ("replace", "NoExecute")

        removed = executor.apply([RemoveDeviceTaints()])

        assert removed.results[0].ok, removed.results[0].detail
        left = client.ResourceV1Api(cluster.admin).list_device_taint_rule(
            label_selector="app.kubernetes.io/managed-by=gpuhealth"
        )
        assert left.items == []
    finally:
        executor.close()


def test_the_policy_refuses_a_rule_on_another_nodes_pool(
    agent: NodeAgent, cluster: Cluster, slices: dict[str, list[str]]
) -> None:
    """RBAC grants create on devicetaintrules cluster-wide; the admission policy narrows it to the pool
    named after the token's node, with HTTP 403 and the policy's message."""
    other = cluster.node_names[1]
    rule: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(other, "gpu-0"),
            "labels": {"app.kubernetes.io/managed-by": "gpuhealth"},
        },
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": other, "device": "gpu-0"},
            "taint": {"key": "gpuhealth.io/unhealthy", "value": "reset_gpu", "effect": "NoSchedule"},
        },
    }

    answers: list[ApiException] = []

    def refused() -> bool:  # the API server's informers load a new policy shortly after it is created
        try:
            agent.resource.create_device_taint_rule(rule)
        except ApiException as exc:
            answers.append(exc)
            return bool(exc.status == 403)
        client.ResourceV1Api(cluster.admin).delete_device_taint_rule(rule["metadata"]["name"])
        return False

    assert wait_until(refused), "the device-taint policy was never enforced"
    message = str(json.loads(answers[-1].body)["message"])
    assert message.endswith(
        f"the gpuhealth agent on node {agent.node} may taint only devices of the pool named after its node"
    )
    assert slices[other]
