"""People authenticated by OpenID Connect ID tokens: the role comes from their groups (highest match), the
name from the token (it is what the history and the audit log record); forged, expired, foreign or role-less
tokens are refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, Forbidden, Unauthorized
from core.clock import ManualClock
from tests.aggregator.oidc_issuer import OidcIssuer

ROLE_MAP = {"gpu-viewers": "viewer", "gpu-oncall": "operator", "platform-admins": "admin"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[OidcIssuer]:
    started = OidcIssuer().start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def aggregator(issuer: OidcIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAggregator]:
    root: Path = tmp_path_factory.mktemp("oidc")
    live = LiveAggregator(
        root / "aggregator.db",
        ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
        None,
        oidc_issuer=issuer.url,
        oidc_role_map=ROLE_MAP,
    ).start()
    yield live
    live.stop()


def _client(live: LiveAggregator, token: str) -> AggregatorClient:
    return AggregatorClient(live.url, token, timeout_s=5.0, retries=1)


def test_a_persons_role_is_the_highest_their_groups_map_to(
    issuer: OidcIssuer, aggregator: LiveAggregator
) -> None:
    viewer = issuer.id_token("vera@example.com", ["gpu-viewers", "everyone"])
    with _client(aggregator, viewer) as client:
        assert client.breaker_status().state == "closed"
        with pytest.raises(Forbidden) as refused:
            client.breaker_reset(reason="x")
    assert str(refused.value) == (
        "the aggregator refused (HTTP 403): viewer oidc:vera@example.com may not reset the breaker: "
        "that needs the admin role"
    )
    admin = issuer.id_token("ada@example.com", ["gpu-viewers", "platform-admins"])
    with _client(aggregator, admin) as client:
        # namespaced: a token file entry named "ada@example.com" is someone else (issue 27)
        assert client.breaker_reset(reason="drill").reset_by == "oidc:ada@example.com"
        assert [(e.actor, e.role, e.method) for e in client.audit()] == [
            ("oidc:ada@example.com", "admin", "oidc")
        ]


@pytest.mark.parametrize("case", ["forged", "expired", "other audience", "other issuer", "no mapped group"])
def test_tokens_that_do_not_prove_a_person_with_a_role_are_refused_with_401(
    issuer: OidcIssuer, aggregator: LiveAggregator, case: str
) -> None:
    token = {
        "forged": lambda: issuer.id_token("eve@example.com", ["platform-admins"], forged=True),
        "expired": lambda: issuer.id_token("ada@example.com", ["platform-admins"], expires_in_s=-120),
        "other audience": lambda: issuer.id_token("ada@example.com", ["platform-admins"], audience="grafana"),
        "other issuer": lambda: issuer.id_token(
            "ada@example.com", ["platform-admins"], issuer="https://evil"
        ),
        "no mapped group": lambda: issuer.id_token("sam@example.com", ["sales"]),
    }[case]()
    with _client(aggregator, token) as client, pytest.raises(Unauthorized) as refused:
        client.summary()
    assert "HTTP 401" in str(refused.value)
