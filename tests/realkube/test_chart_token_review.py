"""The chart's agent identities against a real kube-apiserver: the aggregator's ServiceAccount, with the
chart's system:auth-delegator binding, reviews an agent's pod-bound token issued for the audience the
DaemonSet projects, and the aggregator's own TokenReview authenticator, configured from the rendered
settings, names the node the agent's pod runs on. A token for another audience, or a review asked with
credentials the chart does not bind, names nobody."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane
from helm_render import NAMESPACE, render
from kube_apply import apply_in_namespace
from realkube import Cluster

from aggregator.auth.kubernetes import TokenReviewAuthenticator
from aggregator.auth.principal import Role

KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")


def _component(obj: dict[str, Any]) -> str | None:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/component")


@pytest.fixture(scope="module")
def chart() -> dict[str, Any]:
    """The rendered objects the test needs: identities, RBAC, the agent's projected audience and the
    aggregator's settings."""
    objects = render()
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    [identity] = [
        v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == "aggregator-identity"
    ]
    [projected] = [
        s["serviceAccountToken"] for s in identity["projected"]["sources"] if "serviceAccountToken" in s
    ]
    config_map = next(o for o in objects if o["kind"] == "ConfigMap" and _component(o) == "aggregator")
    settings = yaml.safe_load(config_map["data"]["config.yaml"])["aggregator"]
    accounts = {_component(o): o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    return {
        "objects": [o for o in objects if o["kind"] in KINDS],
        "audience": projected["audience"],
        "settings": settings,
        "agent_account": accounts["agent"],
        "aggregator_account": accounts["aggregator"],
    }


@pytest.fixture(scope="module")
def applied(control_plane: ControlPlane, chart: dict[str, Any]) -> dict[str, Any]:
    api_client = control_plane.api_client()
    try:
        apply_in_namespace(api_client, chart["objects"], NAMESPACE)
    finally:
        api_client.close()
    return chart


def _token(cluster: Cluster, account: str, audiences: list[str] | None, pod: Any = None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if audiences is not None:
        spec["audiences"] = audiences
    if pod is not None:
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    answer = cluster.core.create_namespaced_service_account_token(account, NAMESPACE, {"spec": spec})
    return str(answer.status.token)


@pytest.fixture
def agent_pod(cluster: Cluster, applied: dict[str, Any]) -> Iterator[Any]:
    pod = cluster.core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"generateName": "gpuhealth-agent-"},
            "spec": {
                "nodeName": cluster.node_names[0],
                "serviceAccountName": applied["agent_account"],
                "containers": [{"name": "agent", "image": "gpuhealth"}],
            },
        },
    )
    yield pod
    cluster.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)


def _authenticator(
    control_plane: ControlPlane, settings: dict[str, Any], credentials: str
) -> TokenReviewAuthenticator:
    """The aggregator's authenticator as the rendered settings configure it, against the real API server."""
    return TokenReviewAuthenticator(
        control_plane.url,
        lambda: credentials,
        audience=settings["kubernetes_audience"],
        service_accounts=list(settings["kubernetes_agent_service_accounts"]),
        verify=str(control_plane.ca_file),
    )


def test_the_aggregator_reviews_the_agents_projected_token_and_names_its_node(
    control_plane: ControlPlane, cluster: Cluster, applied: dict[str, Any], agent_pod: Any
) -> None:
    assert applied["audience"] == applied["settings"]["kubernetes_audience"]
    agent_token = _token(cluster, applied["agent_account"], [applied["audience"]], agent_pod)
    aggregator_token = _token(cluster, applied["aggregator_account"], None)
    principal = _authenticator(control_plane, applied["settings"], aggregator_token).authenticate(agent_token)
    assert principal is not None
    assert (principal.role, principal.node) == (Role.AGENT, cluster.node_names[0])


def test_a_token_for_another_audience_names_nobody(
    control_plane: ControlPlane, cluster: Cluster, applied: dict[str, Any], agent_pod: Any
) -> None:
    """The agent's ordinary API token (the API server's audience) is not an aggregator credential."""
    api_token = _token(cluster, applied["agent_account"], None, agent_pod)
    aggregator_token = _token(cluster, applied["aggregator_account"], None)
    assert (
        _authenticator(control_plane, applied["settings"], aggregator_token).authenticate(api_token) is None
    )


def test_without_the_auth_delegator_binding_no_review_is_possible(
    control_plane: ControlPlane, cluster: Cluster, applied: dict[str, Any], agent_pod: Any
) -> None:
    """The agent's own account holds no TokenReview grant: reviewing with it names nobody, so the chart's
    binding of the aggregator's account is what makes the reviews work."""
    agent_token = _token(cluster, applied["agent_account"], [applied["audience"]], agent_pod)
    not_delegated = _token(cluster, applied["agent_account"], None)
    assert _authenticator(control_plane, applied["settings"], not_delegated).authenticate(agent_token) is None
