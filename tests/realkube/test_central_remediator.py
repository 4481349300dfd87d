"""Least privilege with the drain on: the chart's RBAC for the central remediator, enforced by kube-apiserver.

The chart is rendered with the drain and the requeue of every kind on (drain.by aggregator, the default) and
its identities, roles, bindings and admission policies are applied server-side. The agent's identity (a
token bound to a pod on node A) still holds nothing beyond its own node: no eviction, no pod delete, no job
patch, no pod list. The aggregator's identity (a token of its ServiceAccount) holds the drain: the
remediator's real drain of a node, with the chart's drain and requeue settings, goes through with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from control_plane import ControlPlane
from helm_render import AGENT_ACCOUNT, NAMESPACE, render
from kube_apply import apply_in_namespace
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from realkube import Cluster
from waiting import HANG_GUARD_S, wait_until

from aggregator.remediator_settings import RemediatorSettings
from remediation.kubernetes.central import CentralDrains
from remediation.kubernetes.drain.policy import DrainPolicy

IDENTITY_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
VALUES = {
    "drain": {"enabled": True},
    "requeue": {"enabled": True, "jobset": True, "pytorchjob": True, "kueue": True, "volcano": True},
}
FAST = {"poll_interval_s": 0.1, "retry_initial_s": 0.1, "retry_max_s": 0.5, "pod_timeout_s": 20.0}


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> list[dict[str, Any]]:
    """The chart with drain and requeue on: its identities, roles and policies applied server-side once."""
    api_client = control_plane.api_client()
    try:
        rendered = render(VALUES)
        apply_in_namespace(api_client, (o for o in rendered if o["kind"] in IDENTITY_KINDS), NAMESPACE)
        return rendered
    finally:
        api_client.close()


def aggregator_account(rendered: list[dict[str, Any]]) -> str:
    [account] = [
        o["metadata"]["name"]
        for o in rendered
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] != AGENT_ACCOUNT
    ]
    return str(account)


def remediator_settings(rendered: list[dict[str, Any]]) -> RemediatorSettings:
    """The remediator section of the aggregator's rendered config file."""
    import yaml

    [config] = [
        o for o in rendered if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-aggregator")
    ]
    section = yaml.safe_load(config["data"]["config.yaml"])["aggregator"]["remediator"]
    return RemediatorSettings.model_validate(section)


def token_of(cluster: Cluster, account: str, *, bound_to: dict[str, Any] | None = None) -> str:
    """A TokenRequest for ``account`` (bound to a pod when given, as the kubelet's projected token is)."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_to is not None:
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": bound_to["metadata"]["name"],
            "uid": bound_to["metadata"]["uid"],
        }
    answer = cluster.core.create_namespaced_service_account_token(account, NAMESPACE, {"spec": spec})
    return str(answer.status.token)


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(ApiException) as refused:
        call()
    return int(refused.value.status), str(json.loads(refused.value.body)["message"])


def one_pod_job(cluster: Cluster, name: str) -> dict[str, Any]:
    """A one-pod Job taking a whole node; returns its Running pod."""
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    body = {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 3,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container],
                }
            },
        },
    }
    client.BatchV1Api(cluster.admin).create_namespaced_job(cluster.namespace, body)
    labels = {"batch.kubernetes.io/job-name": name}
    assert wait_until(lambda: len(cluster.running(**labels)) == 1), "the Job's pod never ran"
    return cluster.running(**labels)[0]


@pytest.fixture
def agent_api(cluster: Cluster, chart: list[dict[str, Any]]) -> Iterator[client.ApiClient]:
    """The agent's identity on node A: a pod there and a token bound to it."""
    pod = cluster.core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"generateName": "gpuhealth-"},
            "spec": {
                "nodeName": cluster.node_names[0],
                "serviceAccountName": AGENT_ACCOUNT,
                "containers": [{"name": "agent", "image": "gpuhealth"}],
            },
        },
    )
    token = token_of(cluster, AGENT_ACCOUNT, bound_to=cluster.to_dict(pod))
    api_client = cluster.plane.api_client(token=token)
    yield api_client
    api_client.close()
    cluster.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)


def test_with_drain_and_requeue_on_the_agent_may_not_evict_delete_pods_or_patch_jobs(
    cluster: Cluster, agent_api: client.ApiClient
) -> None:
    """Drain and every requeue kind on: the agent's token is refused an eviction, a pod delete, a pod list,
    a Job patch and a JobSet patch by RBAC (403 naming the verb and resource): those grants are the
    aggregator's now."""
    pod = one_pod_job(cluster, "victim")
    name, namespace = pod["metadata"]["name"], cluster.namespace
    core, batch = client.CoreV1Api(agent_api), client.BatchV1Api(agent_api)
    custom = client.CustomObjectsApi(agent_api)
    user = f'User "system:serviceaccount:{NAMESPACE}:{AGENT_ACCOUNT}"'
    where = f'in the namespace "{namespace}"'
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "evict": (
            lambda: core.create_namespaced_pod_eviction(
                name, namespace, {"metadata": {"name": name, "namespace": namespace}}
            ),
            f'pods "{name}" is forbidden: {user} cannot create resource "pods/eviction" in API group "" {where}',
        ),
        "delete pod": (
            lambda: core.delete_namespaced_pod(name, namespace),
            f'pods "{name}" is forbidden: {user} cannot delete resource "pods" in API group "" {where}',
        ),
        "list pods": (
            lambda: core.list_namespaced_pod(namespace),
            f'pods is forbidden: {user} cannot list resource "pods" in API group "" {where}',
        ),
        "patch job": (
            lambda: batch.patch_namespaced_job("victim", namespace, {"spec": {"suspend": True}}),
            f'jobs.batch "victim" is forbidden: {user} cannot patch resource "jobs" in API group "batch" {where}',
        ),
        "patch jobset": (
            lambda: custom.patch_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "llm", {"spec": {"suspend": True}}
            ),
            f'jobsets.jobset.x-k8s.io "llm" is forbidden: {user} cannot patch resource "jobsets" in API group '
            f'"jobset.x-k8s.io" {where}',
        ),
    }
    for what, (call, expected) in cases.items():
        assert refusal(call) == (403, expected), what
    assert [p["metadata"]["uid"] for p in cluster.running()] == [pod["metadata"]["uid"]]


def test_the_aggregators_identity_drains_a_node_with_the_charts_grants(
    cluster: Cluster, chart: list[dict[str, Any]]
) -> None:
    """The remediator with a token of the aggregator's ServiceAccount and the chart's own drain and requeue
    settings: it cordons the node, evicts the Job's pod through the Eviction API and finishes the drain
    (the Job is then restarted elsewhere by its controller); no step is refused."""
    pod = one_pod_job(cluster, "trainer")
    node = pod["spec"]["nodeName"]
    settings = remediator_settings(chart)
    drain = DrainPolicy.model_validate({**settings.drain.model_dump(), **FAST})
    api_client = cluster.plane.api_client(token=token_of(cluster, aggregator_account(chart)))
    central = CentralDrains(api_client, drain, settings.requeue, owns_client=True)
    try:
        runner = central.drain_for(node)
        assert runner.start("inc-central", deadline_s=HANG_GUARD_S) == "drain started"
        assert runner.wait(HANG_GUARD_S * 2), "the remediator's drain did not end"
        state = runner.state
        assert state is not None and str(state.phase) == "complete", state
        news = runner.updates()
        assert news and news[0].ok, news
        assert all(update.ok for update in news), news
    finally:
        central.close()
    assert cluster.node(node)["spec"].get("unschedulable") is True
    assert wait_until(
        lambda: any(p["spec"]["nodeName"] != node for p in cluster.running()),
        message="the Job's replacement pod running on the other node",
    )
