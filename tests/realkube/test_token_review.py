"""The aggregator's Kubernetes authenticator against the real API server's TokenReview.

``tests/aggregator/test_authz_kubernetes.py`` drives the authenticator against the emulator's TokenReview;
here kube-apiserver itself mints and reviews the tokens. The agent's token is a TokenRequest for the agent's
ServiceAccount with our audience, bound to a Pod on node A (what the kubelet projects into the agent's pod);
the aggregator reviews it with its own ServiceAccount's token, which holds ``system:auth-delegator`` as the
chart grants it. kube-apiserver (1.37: ServiceAccountTokenPodNodeInfo is on by default since 1.30 and GA
since 1.32) puts the pod's node into the review's ``authentication.kubernetes.io/node-name`` extra, and the
aggregator lets the token act for that node only. A token without our audience, of another ServiceAccount,
not bound to a pod (no node name), or whose pod is gone, is no agent's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_aggregator import LiveAggregator
from realkube import Cluster
from waiting import wait_until

from agent.uplink.client import AggregatorClient, Forbidden, Unauthorized
from aggregator.auth.kubernetes import NODE_NAME_EXTRA, TokenReviewAuthenticator, credentials_from_file
from aggregator.auth.principal import AuthMethod, Principal, Role
from core.aggregator_api import Report
from core.clock import ManualClock
from core.findings import Action
from tests.aggregator.builders import report

AUDIENCE = "gpuhealth-aggregator"
AGENT_ACCOUNT = "gpuhealth-agent"
AGGREGATOR_ACCOUNT = "gpuhealth-aggregator"


@dataclass
class Identities:
    """The agent's and the aggregator's ServiceAccounts in the test's namespace, and a pod on node A."""

    cluster: Cluster
    pods: dict[str, Any]  # by ServiceAccount: the agent's pod and another one, both on node A
    aggregator_token_file: Path

    @property
    def agent_user(self) -> str:
        return f"system:serviceaccount:{self.cluster.namespace}:{AGENT_ACCOUNT}"

    def token(
        self, account: str = AGENT_ACCOUNT, *, audiences: list[str] | None = None, bound: bool = True
    ) -> str:
        """A TokenRequest of the real API server: ``audiences`` (None: the API server's own), bound to the
        account's pod on node A unless ``bound`` is False."""
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if audiences is not None:
            spec["audiences"] = audiences
        if bound:
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": self.pods[account].metadata.name,
                "uid": self.pods[account].metadata.uid,
            }
        answer = self.cluster.core.create_namespaced_service_account_token(
            account, self.cluster.namespace, {"spec": spec}
        )
        return str(answer.status.token)


@pytest.fixture
def identities(cluster: Cluster, tmp_path: Path) -> Iterator[Identities]:
    namespace = cluster.namespace
    for account in (AGENT_ACCOUNT, AGGREGATOR_ACCOUNT):
        cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    rbac = client.RbacAuthorizationV1Api(cluster.admin)
    binding = f"{namespace}-token-review"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": AGGREGATOR_ACCOUNT, "namespace": namespace}],
        }
    )
    pods = {
        account: cluster.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": account},
                "spec": {
                    "nodeName": cluster.node_names[0],
                    "serviceAccountName": account,
                    "containers": [{"name": "main", "image": "gpuhealth"}],
                },
            },
        )
        for account in (AGENT_ACCOUNT, AGGREGATOR_ACCOUNT)
    }
    made = Identities(cluster, pods, tmp_path / "aggregator-token")
    made.aggregator_token_file.write_text(made.token(AGGREGATOR_ACCOUNT, bound=False) + "\n")
    yield made
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role_binding(binding)


def authenticator(plane: ControlPlane, identities: Identities) -> TokenReviewAuthenticator:
    """The aggregator's authenticator as its settings build it: the API server, its CA, our audience."""
    return TokenReviewAuthenticator(
        plane.url,
        credentials_from_file(identities.aggregator_token_file),
        audience=AUDIENCE,
        service_accounts=[identities.agent_user],
        verify=str(plane.ca_file),
    )


def test_the_real_token_review_names_the_node_of_the_pod_the_token_is_bound_to(
    control_plane: ControlPlane, cluster: Cluster, identities: Identities
) -> None:
    """The review of a pod-bound token for our audience says the agent's user and, in the node-name extra,
    the pod's node: the authenticator makes it the agent of that node."""
    token = identities.token(audiences=[AUDIENCE])
    review = client.AuthenticationV1Api(cluster.admin).create_token_review(
        {"spec": {"token": token, "audiences": [AUDIENCE]}}
    )
    assert review.status.authenticated is True
    assert review.status.audiences == [AUDIENCE]
    assert review.status.user.username == identities.agent_user
    assert review.status.user.extra[NODE_NAME_EXTRA] == [cluster.node_names[0]]

    node = cluster.node_names[0]
    assert authenticator(control_plane, identities).authenticate(token) == Principal(
        name=node, role=Role.AGENT, method=AuthMethod.KUBERNETES, node=node
    )


@pytest.mark.parametrize(
    ("account", "audiences", "bound"),
    [
        (AGENT_ACCOUNT, None, True),  # the API server's own audience: a token for kubectl, not for us
        (AGENT_ACCOUNT, ["someone-else"], True),
        (AGGREGATOR_ACCOUNT, [AUDIENCE], True),  # another ServiceAccount's pod on the same node
        (AGENT_ACCOUNT, [AUDIENCE], False),  # not bound to a pod: no node name
    ],
    ids=["api-server-audience", "other-audience", "other-service-account", "not-pod-bound"],
)
def test_tokens_that_are_not_an_agents_are_refused(
    control_plane: ControlPlane,
    identities: Identities,
    account: str,
    audiences: list[str] | None,
    bound: bool,
) -> None:
    token = identities.token(account, audiences=audiences, bound=bound)
    assert authenticator(control_plane, identities).authenticate(token) is None


def test_a_token_whose_pod_is_gone_is_refused(
    control_plane: ControlPlane, cluster: Cluster, identities: Identities
) -> None:
    """A bound token dies with its pod: the API server no longer authenticates it."""
    token = identities.token(audiences=[AUDIENCE])
    assert authenticator(control_plane, identities).authenticate(token) is not None
    cluster.core.delete_namespaced_pod(AGENT_ACCOUNT, cluster.namespace, grace_period_seconds=0)
    reviews = client.AuthenticationV1Api(cluster.admin)

    def refused() -> bool:  # the API server looks the pod up through its informer: shortly after
        answer = reviews.create_token_review({"spec": {"token": token, "audiences": [AUDIENCE]}})
        return answer.status.authenticated is not True

    assert wait_until(refused), "the API server kept authenticating the token of a deleted pod"
    assert authenticator(control_plane, identities).authenticate(token) is None  # a fresh cache


def test_over_http_the_agent_acts_for_its_own_node_only(
    control_plane: ControlPlane, cluster: Cluster, identities: Identities, tmp_path: Path
) -> None:
    """The aggregator configured for TokenReview against the real API server: the agent's token reports
    and takes a permit for node A, is refused (403, one line naming the rule) for node B, and a token for
    the API server's audience gets 401."""
    node, other = cluster.node_names
    live = LiveAggregator(
        tmp_path / "aggregator.db",
        ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
        None,
        kubernetes_api_url=control_plane.url,
        kubernetes_ca_file=control_plane.ca_file,
        kubernetes_audience=AUDIENCE,
        kubernetes_agent_service_accounts=[identities.agent_user],
        kubernetes_token_file=identities.aggregator_token_file,
    ).start()
    try:
        with AggregatorClient(live.url, identities.token(audiences=[AUDIENCE]), retries=1) as agent:
            assert agent.report(
                Report.model_validate(report(node, 1, "unhealthy", incident="inc-1"))
            ).accepted
            assert agent.request_permit(node, Action.REBOOT, incident_id="inc-1").active
            with pytest.raises(Forbidden) as refused:
                agent.report(Report.model_validate(report(other, 1)))
            assert str(refused.value) == (
                f"the aggregator refused (HTTP 403): agent {node} may only report for its own node, not {other}"
            )
        with (
            AggregatorClient(live.url, identities.token(), retries=1) as outsider,
            pytest.raises(Unauthorized, match="HTTP 401"),
        ):
            outsider.report(Report.model_validate(report(node, 2)))
    finally:
        live.stop()
