"""Least privilege for real: the chart's RBAC and ValidatingAdmissionPolicies, enforced by kube-apiserver.

The chart is rendered by Helm's engine (``helm_render``) and its ServiceAccount, ClusterRole,
ClusterRoleBinding and both policies (with their bindings) are applied server-side. The agent's identity is
a TokenRequest for its ServiceAccount bound to a Pod on node A, so the API server puts
``authentication.kubernetes.io/node-name: A`` into the request's user info, which the policies read. With
that token the agent does its whole job on node A, and everything else is refused: the same writes on node
B, foreign labels, taints, annotations and conditions on node A, and whatever RBAC does not grant.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane
from helm_render import AGENT_ACCOUNT, AGENT_USER, NAMESPACE, render
from kube_apply import Applier, apply_in_namespace
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from realkube import Cluster, RealGpuNode
from structlog.testing import capture_logs
from waiting import wait_until

from core.clock import ManualClock
from remediation.plan.planner import RemediationPolicy

POLICY_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def chart_policies(control_plane: ControlPlane) -> list[dict[str, Any]]:
    """The chart's identity, RBAC and admission objects (default values), applied server-side once."""
    api_client = control_plane.api_client()
    try:
        objects = [obj for obj in render() if obj["kind"] in POLICY_KINDS]
        assert {obj["kind"] for obj in objects} == set(POLICY_KINDS)
        apply_in_namespace(api_client, objects, NAMESPACE)
        return objects
    finally:
        api_client.close()


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    """(HTTP status, Status message) of a request that must be refused."""
    with pytest.raises(ApiException) as refused:
        call()
    body = json.loads(refused.value.body)
    return int(refused.value.status), str(body["message"])


class Agent:
    """The agent's identity on node A: a pod there and a token bound to it."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self.cluster = cluster
        self.node = node
        pod = cluster.core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"generateName": "gpuhealth-"},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": AGENT_ACCOUNT,
                    "containers": [{"name": "agent", "image": "gpuhealth"}],
                },
            },
        )
        self.pod = pod.metadata.name
        request = {
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": self.pod,
                    "uid": pod.metadata.uid,
                },
            }
        }
        answer = cluster.core.create_namespaced_service_account_token(AGENT_ACCOUNT, NAMESPACE, request)
        self.token: str = str(answer.status.token)
        self.api_client = cluster.plane.api_client(token=self.token)
        self.core = client.CoreV1Api(self.api_client)

    def close(self) -> None:
        self.api_client.close()
        self.cluster.core.delete_namespaced_pod(self.pod, NAMESPACE, grace_period_seconds=0)


@pytest.fixture
def agent(cluster: Cluster, chart_policies: list[dict[str, Any]]) -> Iterator[Agent]:
    made = Agent(cluster, cluster.node_names[0])
    other = cluster.node_names[1]

    def enforced() -> bool:  # the policies are loaded by the API server's informers shortly after creation
        try:
            made.core.patch_node(other, {"metadata": {"labels": {"gpuhealth.io/state": "healthy"}}})
        except ApiException:
            return True
        return False

    assert wait_until(enforced), "the admission policies were never enforced"
    yield made
    made.close()


def test_the_bound_token_names_the_agents_user_and_node(agent: Agent) -> None:
    """SelfSubjectReview with the agent's token: its ServiceAccount user, and the node of its pod."""
    review = client.AuthenticationV1Api(agent.api_client).create_self_subject_review({})
    user = review.status.user_info
    assert user.username == AGENT_USER
    assert user.extra[NODE_NAME_EXTRA] == [agent.node]


def test_with_its_own_token_the_agent_does_its_whole_job_on_its_node(
    agent: Agent, cluster: Cluster, tmp_path: Path
) -> None:
    """XID 79 with cordon on: condition, label, taint, annotations, cordon and the Event all go through
    with the agent's token; recovery removes them again, also allowed."""
    node = RealGpuNode(cluster, agent.node, ManualClock(), tmp_path / "state", agent.api_client)
    node.policy = RemediationPolicy(cordon=True)
    try:
        node.tick()
        node.xid(79)
        result = node.tick()
        assert [(type(r.step).__name__, r.detail) for r in result.report.results if not r.ok] == []
        assert node.taint() == "reboot:NoSchedule" and node.label() == "unhealthy" and node.cordoned()
        assert node.events() == ["GPUHealthUnhealthy"]
    finally:
        node.close()


def test_the_agent_is_refused_every_write_on_another_node(agent: Agent, cluster: Cluster) -> None:
    """Label, taint, cordon, status and an Event about node B: each one is refused by the policies with the
    message naming the agent's node and the other node."""
    other = cluster.node_names[1]
    denied = f"the gpuhealth agent on node {agent.node} may not modify node {other}"
    taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}
    condition = {"type": "GPUHealthy", "status": "False", "reason": "XID_79", "message": "x"}
    writes: dict[str, Callable[[], object]] = {
        "label": lambda: agent.core.patch_node(other, {"metadata": {"labels": {"gpuhealth.io/state": "x"}}}),
        "taint": lambda: agent.core.patch_node(other, {"spec": {"taints": [taint]}}),
        "cordon": lambda: agent.core.patch_node(other, {"spec": {"unschedulable": True}}),
        "status": lambda: agent.core.patch_node_status(other, {"status": {"conditions": [condition]}}),
    }
    answers = {what: refusal(write) for what, write in writes.items()}
    for what, (status, message) in answers.items():
        assert status == 403, (what, status, message)
        assert message == (
            f"nodes \"{other}\" is forbidden: ValidatingAdmissionPolicy 'gpuhealth-own-node' with binding "
            f"'gpuhealth-own-node' denied request: {denied}"
        ), what

    event = {
        "metadata": {"generateName": "gpuhealth-"},
        "involvedObject": {"kind": "Node", "name": other, "apiVersion": "v1"},
        "reason": "GPUHealthUnhealthy",
        "message": "x",
        "type": "Warning",
    }
    status, message = refusal(lambda: agent.core.create_namespaced_event("default", event))
    assert status == 403
    assert message.endswith("the gpuhealth agent may record Events only about the node it runs on")
    assert cluster.node(other)["spec"].get("taints") is None


def test_on_its_own_node_the_agent_may_change_only_what_it_owns(agent: Agent, cluster: Cluster) -> None:
    """Node A, the agent's token: another label, annotation, taint or condition is refused, each with the
    policy's own message; the node is unchanged."""
    node = agent.node
    before = cluster.node(node)
    ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "x"}
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "label": (
            lambda: agent.core.patch_node(node, {"metadata": {"labels": {"team": "other"}}}),
            "the gpuhealth agent may change only its own label gpuhealth.io/state",
        ),
        "annotation": (
            lambda: agent.core.patch_node(node, {"metadata": {"annotations": {"owner": "me"}}}),
            "the gpuhealth agent may change only gpuhealth.io/ annotations",
        ),
        "taint": (
            lambda: agent.core.patch_node(
                node, {"spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}}
            ),
            "the gpuhealth agent may add, change or remove only its own taint gpuhealth.io/unhealthy",
        ),
        "condition": (
            lambda: agent.core.patch_node_status(node, {"status": {"conditions": [ready]}}),
            "the gpuhealth agent may change only its own node condition GPUHealthy",
        ),
    }
    for what, (write, expected) in cases.items():
        status, message = refusal(write)
        assert status == 403, (what, status, message)
        assert message.endswith(expected), (what, message)
    after = cluster.node(node)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_anything_rbac_does_not_grant_is_refused(agent: Agent, cluster: Cluster) -> None:
    """Delete or create a node, read secrets, list pods, evict a pod, create a pod: 403 from RBAC (the
    Node authorizer has no opinion on a ServiceAccount), each message naming the verb and resource."""
    node = agent.node
    user = f'User "{AGENT_USER}"'
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "delete node": (
            lambda: agent.core.delete_node(node),
            f'nodes "{node}" is forbidden: {user} cannot delete resource "nodes" in API group "" at the cluster scope',
        ),
        "create node": (
            lambda: agent.core.create_node({"metadata": {"name": "rogue"}}),
            f'nodes is forbidden: {user} cannot create resource "nodes" in API group "" at the cluster scope',
        ),
        "read secrets": (
            lambda: agent.core.list_namespaced_secret("kube-system"),
            f'secrets is forbidden: {user} cannot list resource "secrets" in API group "" '
            'in the namespace "kube-system"',
        ),
        "list pods": (
            agent.core.list_pod_for_all_namespaces,
            f'pods is forbidden: {user} cannot list resource "pods" in API group "" at the cluster scope',
        ),
        "evict": (
            lambda: agent.core.create_namespaced_pod_eviction(
                agent.pod, NAMESPACE, {"metadata": {"name": agent.pod, "namespace": NAMESPACE}}
            ),
            f'pods "{agent.pod}" is forbidden: {user} cannot create resource "pods/eviction" in API group "" '
            f'in the namespace "{NAMESPACE}"',
        ),
        "create pod": (
            lambda: agent.core.create_namespaced_pod(
                cluster.namespace,
                {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            ),
            f'pods is forbidden: {user} cannot create resource "pods" in API group "" '
            f'in the namespace "{cluster.namespace}"',
        ),
    }
    for what, (call, expected) in cases.items():
        assert refusal(call) == (403, expected), what


def test_an_agent_pointed_at_another_node_is_held_with_the_policys_own_message(
    agent: Agent, cluster: Cluster, tmp_path: Path
) -> None:
    """The agent of node A misconfigured (or stolen) to act for node B: its first pass is refused by the
    admission policy (HTTP 403), logged once as an admission refusal quoting the policy, and its writes are
    held; node B is unchanged."""
    other = cluster.node_names[1]
    before = cluster.node(other)["metadata"]["resourceVersion"]
    node = RealGpuNode(cluster, other, ManualClock(), tmp_path / "state", agent.api_client)
    try:
        with capture_logs() as logs:
            first = node.tick()
            node.ticks(3)
    finally:
        node.close()

    assert first.report.results and not any(result.ok for result in first.report.results)
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["kubernetes_forbidden"]
    assert errors[0]["cause"] == "admission"
    assert errors[0]["problem"].endswith(
        f"the gpuhealth agent on node {agent.node} may not modify node {other}"
    )
    assert node.writes() == 1  # the refused write; the hold keeps the others from being sent
    assert cluster.node(other)["metadata"]["resourceVersion"] == before


def test_an_operators_own_policy_denying_with_422_holds_the_agent_too(
    agent: Agent, cluster: Cluster, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A ValidatingAdmissionPolicy of the cluster's operators (no ``reason``: kube-apiserver answers 422
    Invalid) freezes node A's metadata: the agent's label patch is refused, logged once as an admission
    refusal quoting that policy with the status the server gave, and the agent's writes are held."""
    name = f"freeze-{agent.node}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "this-node", "expression": f"object.metadata.name == '{agent.node}'"},
                {"name": "the-agent", "expression": f"request.userInfo.username == '{AGENT_USER}'"},
            ],
            "validations": [{"expression": "false", "message": "node frozen by the operators"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    admin = control_plane.api_client()
    applier = Applier(admin)
    for obj in (policy, binding):
        applier.apply(obj)
    node = RealGpuNode(cluster, agent.node, ManualClock(), tmp_path / "state", agent.api_client)
    try:
        probes = iter(range(10**6))

        def frozen() -> bool:  # a change the chart's policies allow, refused only by the operators' one
            try:
                agent.core.patch_node(
                    agent.node, {"metadata": {"annotations": {"gpuhealth.io/probe": str(next(probes))}}}
                )
            except ApiException as exc:
                return bool(exc.status == 422)
            return False

        assert wait_until(frozen), "the operators' policy was never enforced"
        with capture_logs() as logs:
            first = node.tick()
            node.ticks(3)
    finally:
        node.close()
        registration = client.AdmissionregistrationV1Api(admin)
        registration.delete_validating_admission_policy_binding(name)
        registration.delete_validating_admission_policy(name)
        admin.close()

    refused = [r for r in first.report.results if not r.ok]
    assert [type(r.step).__name__ for r in refused] == ["SetStateLabel"]
    assert refused[0].detail.startswith(
        "HTTP 422 forbidden: patch nodes refused by admission policy (HTTP 422)"
    )
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [(e["event"], e["cause"]) for e in errors] == [("kubernetes_forbidden", "admission")]
    assert errors[0]["problem"].endswith("node frozen by the operators")


def test_the_agent_may_not_change_what_the_kubelet_and_humans_own_on_its_node(
    agent: Agent, cluster: Cluster
) -> None:
    """Node A, the agent's token: allocatable, capacity and addresses (status), ownerReferences and
    finalizers (metadata), and the human-release annotation, whether added or changed: each is refused by
    the policy with its own message, and the node stays as it was."""
    node = agent.node
    before = cluster.node(node)
    gpus = {"nvidia.com/gpu": "0"}
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": NAMESPACE, "uid": before["metadata"]["uid"]}
    release = {"metadata": {"annotations": {"gpuhealth.io/manual-release": "inc-anything"}}}
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "allocatable": (
            lambda: agent.core.patch_node_status(node, {"status": {"allocatable": gpus}}),
            "the gpuhealth agent may not change its node's allocatable or capacity",
        ),
        "capacity": (
            lambda: agent.core.patch_node_status(node, {"status": {"capacity": gpus}}),
            "the gpuhealth agent may not change its node's allocatable or capacity",
        ),
        "addresses": (
            lambda: agent.core.patch_node_status(
                node, {"status": {"addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}}
            ),
            "the gpuhealth agent may not change its node's addresses",
        ),
        "ownerReferences": (
            lambda: agent.core.patch_node(node, {"metadata": {"ownerReferences": [owner]}}),
            "the gpuhealth agent may not change its node's ownerReferences or finalizers",
        ),
        "finalizers": (
            lambda: agent.core.patch_node(node, {"metadata": {"finalizers": ["example.com/keep"]}}),
            "the gpuhealth agent may not change its node's ownerReferences or finalizers",
        ),
        "manual-release": (
            lambda: agent.core.patch_node(node, release),
            "the gpuhealth agent may not write gpuhealth.io/manual-release, which only a human sets",
        ),
    }
    for what, (write, expected) in cases.items():
        status, message = refusal(write)
        assert status == 403, (what, status, message)
        assert message.endswith(expected), (what, message)
    after = cluster.node(node)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert (
        after["status"]["allocatable"]["nvidia.com/gpu"] == before["status"]["allocatable"]["nvidia.com/gpu"]
    )


def test_the_agent_may_not_change_or_lift_a_humans_release(
    agent: Agent, cluster: Cluster, human: client.CoreV1Api
) -> None:
    """A human released node A (gpuhealth.io/manual-release): the agent can neither rewrite that value nor
    remove it, while its own annotations still go through beside it."""
    node = agent.node
    human.patch_node(node, {"metadata": {"annotations": {"gpuhealth.io/manual-release": "inc-1"}}})
    expected = "the gpuhealth agent may not write gpuhealth.io/manual-release, which only a human sets"
    for value in ("inc-2", None):
        patch = {"metadata": {"annotations": {"gpuhealth.io/manual-release": value}}}
        status, message = refusal(partial(agent.core.patch_node, node, patch))
        assert (status, message.endswith(expected)) == (403, True), (value, message)
    agent.core.patch_node(node, {"metadata": {"annotations": {"gpuhealth.io/incident": "inc-1"}}})
    annotations = cluster.node(node)["metadata"]["annotations"]
    assert annotations["gpuhealth.io/manual-release"] == "inc-1"
    assert annotations["gpuhealth.io/incident"] == "inc-1"


def test_what_the_agent_owns_on_its_node_still_goes_through(agent: Agent, cluster: Cluster) -> None:
    """The same token, one write of each kind the agent makes: condition, label, taint, cordon and its
    annotations are admitted (so the rules above refuse only what they name), and undone again."""
    node = agent.node
    taint = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}
    condition = {"type": "GPUHealthy", "status": "False", "reason": "XID_79", "message": "x"}
    others = cluster.node(node)["spec"].get("taints") or []
    agent.core.patch_node_status(node, {"status": {"conditions": [condition]}})
    agent.core.patch_node(
        node,
        {
            "metadata": {
                "labels": {"gpuhealth.io/state": "unhealthy"},
                "annotations": {"gpuhealth.io/incident": "inc-1", "gpuhealth.io/cordoned": "true"},
            },
            "spec": {"taints": [*others, taint], "unschedulable": True},
        },
    )
    marked = cluster.node(node)
    assert marked["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"
    assert marked["metadata"]["annotations"]["gpuhealth.io/incident"] == "inc-1"
    assert taint in marked["spec"]["taints"] and marked["spec"]["unschedulable"] is True
    assert any(c["type"] == "GPUHealthy" and c["status"] == "False" for c in marked["status"]["conditions"])
    release_our_marks(agent, cluster, taint["key"])
    released = cluster.node(node)
    assert "gpuhealth.io/state" not in released["metadata"].get("labels", {})
    assert taint["key"] not in {t["key"] for t in released["spec"].get("taints") or []}
    assert not released["spec"].get("unschedulable")


def release_our_marks(agent: Agent, cluster: Cluster, taint_key: str) -> None:
    """Label, annotations, taint and cordon off again, as the agent does: the taint list is written whole
    with the node's resourceVersion, so a taint the node lifecycle controller adds meanwhile (it taints a
    cordoned node) makes the write conflict (409) instead of dropping that taint; then read and write again."""
    for _ in range(10):
        current = cluster.node(agent.node)
        kept = [t for t in current["spec"].get("taints") or [] if t["key"] != taint_key]
        patch = {
            "metadata": {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "labels": {"gpuhealth.io/state": None},
                "annotations": {"gpuhealth.io/incident": None, "gpuhealth.io/cordoned": None},
            },
            "spec": {"taints": kept or None, "unschedulable": False},
        }
        try:
            agent.core.patch_node(agent.node, patch)
        except ApiException as exc:
            if exc.status != 409:
                raise
            continue
        return
    pytest.fail("the node kept changing under the release")
