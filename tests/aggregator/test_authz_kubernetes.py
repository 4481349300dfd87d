"""Agents authenticated by Kubernetes TokenReview (the emulated API server reviews the projected
ServiceAccount tokens it issued): the node comes from the review, never from the agent; wrong audience, wrong
ServiceAccount or a token bound to no node are not agents; reviews are cached."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, Forbidden, Unauthorized
from core.aggregator_api import Report
from core.clock import ManualClock
from core.findings import Action
from sim.kube.harness import KubeSim
from tests.aggregator.builders import report

AUDIENCE = "gpuhealth-aggregator"
AGENT_SA = "gpuhealth:gpuhealth-agent"
NODE = "gpu-node-3"


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    sim = KubeSim(controllers=False).start()
    yield sim
    sim.stop()


@pytest.fixture
def aggregator(kube: KubeSim, tmp_path: Path) -> Iterator[LiveAggregator]:
    own_credentials = tmp_path / "sa-token"
    own_credentials.write_text("aggregator-service-account-token\n")
    live = LiveAggregator(
        tmp_path / "aggregator.db",
        ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
        None,
        kubernetes_api_url=kube.url,
        kubernetes_audience=AUDIENCE,
        kubernetes_agent_service_accounts=[f"system:serviceaccount:{AGENT_SA}"],
        kubernetes_token_file=own_credentials,
    ).start()
    yield live
    live.stop()


def _client(live: LiveAggregator, token: str) -> AggregatorClient:
    return AggregatorClient(live.url, token, timeout_s=5.0, retries=1)


def test_an_agent_acts_for_the_node_its_pod_runs_on_and_no_other(
    kube: KubeSim, aggregator: LiveAggregator
) -> None:
    token = kube.token_reviews.issue(AGENT_SA, node=NODE, audiences=(AUDIENCE,))
    with _client(aggregator, token) as agent:
        assert agent.report(Report.model_validate(report(NODE, 1, "unhealthy", incident="inc-1"))).accepted
        assert agent.request_permit(NODE, Action.REBOOT, incident_id="inc-1").active
        with pytest.raises(Forbidden) as refused:
            agent.report(Report.model_validate(report("gpu-node-7", 1)))
        assert str(refused.value) == (
            f"the aggregator refused (HTTP 403): agent {NODE} may only report for its own node, not gpu-node-7"
        )
        with pytest.raises(Forbidden, match="may not read the fleet"):
            agent.summary()
    assert kube.token_reviews.reviews == 1  # one review, then the cache answered


@pytest.mark.parametrize(
    ("service_account", "node", "audiences"),
    [
        (AGENT_SA, NODE, ("https://kubernetes.default.svc",)),  # a token for the API server, not for us
        ("default:default", NODE, (AUDIENCE,)),  # some other pod on the node
        (AGENT_SA, None, (AUDIENCE,)),  # not bound to a pod on a node
    ],
    ids=["wrong audience", "other service account", "no node"],
)
def test_tokens_that_are_not_an_agents_are_refused_with_401(
    kube: KubeSim,
    aggregator: LiveAggregator,
    service_account: str,
    node: str | None,
    audiences: tuple[str, ...],
) -> None:
    token = kube.token_reviews.issue(service_account, node=node, audiences=audiences)
    with _client(aggregator, token) as caller, pytest.raises(Unauthorized) as refused:
        caller.report(Report.model_validate(report(NODE, 1)))
    assert "HTTP 401" in str(refused.value)


def test_an_unreachable_api_server_refuses_without_caching_the_failure(
    kube: KubeSim, aggregator: LiveAggregator
) -> None:
    token = kube.token_reviews.issue(AGENT_SA, node=NODE, audiences=(AUDIENCE,))
    kube.server.stop()
    with _client(aggregator, token) as agent:
        with pytest.raises(Unauthorized):
            agent.report(Report.model_validate(report(NODE, 1)))
        kube.server.start()
        assert agent.report(Report.model_validate(report(NODE, 1))).accepted


def test_the_agent_reads_its_rotated_projected_token_again(
    kube: KubeSim, aggregator: LiveAggregator, tmp_path: Path
) -> None:
    """The kubelet replaces a projected token on disk before it expires; the agent's client follows."""
    token_file = tmp_path / "projected-token"
    first = kube.token_reviews.issue(AGENT_SA, node=NODE, audiences=(AUDIENCE,))
    token_file.write_text(first + "\n")
    with AggregatorClient(aggregator.url, None, token_file=token_file, retries=1) as agent:
        assert agent.report(Report.model_validate(report(NODE, 1))).accepted
        kube.token_reviews.revoke(first)
        token_file.write_text(kube.token_reviews.issue(AGENT_SA, node=NODE, audiences=(AUDIENCE,)) + "\n")
        assert agent.report(Report.model_validate(report(NODE, 2))).accepted
    assert kube.token_reviews.reviews == 2  # the new token was reviewed; the old one is no longer sent
