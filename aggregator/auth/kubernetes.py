"""Agents authenticated by Kubernetes: the agent sends its projected ServiceAccount token (audience of our
own), and the API server says, through a TokenReview, whose it is and on which node its pod runs.

The aggregator calls the API server with its own credentials (its ServiceAccount token; it needs the
``system:auth-delegator`` ClusterRole). A token is an agent's only if it is authenticated for our audience,
belongs to one of the agent ServiceAccounts, and names a node (``authentication.kubernetes.io/node-name``,
set for tokens bound to a pod); the agent may then act for that node only. Answers are cached briefly (by
the token's hash), so a fleet's reports cost the API server a review per agent per minute, not per report.
Tokens plainly another authenticator's (a person's OIDC ID token, a Nomad workload identity) are never sent
to the API server.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import structlog

from aggregator.auth.answer_cache import UNKNOWN, AnswerCache, Unknown
from aggregator.auth.principal import AuthMethod, Principal, Role

log = structlog.get_logger(__name__)

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a path, not a secret
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
CACHE_TTL_S = 60.0
NEGATIVE_CACHE_TTL_S = 10.0  # a wrong token is not reviewed again at once (no amplification)
MAX_CACHED = 100_000


class TokenReviewAuthenticator:
    """Agents by TokenReview against the Kubernetes API server."""

    def __init__(
        self,
        api_url: str,
        credentials: Callable[[], str],
        *,
        audience: str,
        service_accounts: list[str],
        foreign_issuers: tuple[str, ...] = (),
        verify: str | bool = True,
        timeout_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        # A CA file becomes a context here: httpx deprecates a path as ``verify``.
        context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        self._http = httpx.Client(
            base_url=api_url.rstrip("/"), verify=context, timeout=timeout_s, transport=transport
        )
        self._credentials = credentials
        self._audience = audience
        self._service_accounts = frozenset(service_accounts)
        self._foreign_issuers = frozenset(issuer.rstrip("/") for issuer in foreign_issuers)
        self._answers = AnswerCache(monotonic, MAX_CACHED)

    def known_answer(self, token: str) -> Principal | Unknown | None:
        if self._someone_elses(token):
            return None
        return self._answers.get(token)

    def authenticate(self, token: str) -> Principal | None:
        if self._someone_elses(token):
            return None  # never sent to the API server: a person's ID token is not the cluster's to see
        cached = self._answers.get(token)
        if cached is not UNKNOWN:
            return cached
        now = self._answers.now()
        answered, principal = self._review(token)
        if not answered:
            return None  # not cached: the API server did not answer, ask again next time
        ttl = CACHE_TTL_S if principal is not None else NEGATIVE_CACHE_TTL_S
        self._answers.put(token, principal, now + ttl)
        return principal

    def _someone_elses(self, token: str) -> bool:
        """Whether the token is plainly another authenticator's: a JWT of the OIDC issuer (``iss``) or a
        Nomad workload identity. Read without verifying: it only decides whom not to ask."""
        if token.count(".") != 2:
            return False
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return False
        return str(claims.get("iss", "")).rstrip("/") in self._foreign_issuers or "nomad_job_id" in claims

    def _review(self, token: str) -> tuple[bool, Principal | None]:
        """Whether the API server answered, and the agent the token is (None: not one)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self._audience]},
        }
        try:
            response = self._http.post(
                TOKEN_REVIEW_PATH, json=body, headers={"Authorization": f"Bearer {self._credentials()}"}
            )
            response.raise_for_status()
            status = response.json().get("status") or {}
        except (httpx.HTTPError, OSError, ValueError, AttributeError) as exc:
            log.warning("token review failed", error=type(exc).__name__)
            return False, None
        return True, self._principal(status) if isinstance(status, dict) else None

    def _principal(self, status: dict[str, Any]) -> Principal | None:
        if status.get("authenticated") is not True or self._audience not in (status.get("audiences") or []):
            return None
        user = status.get("user") or {}
        username = user.get("username")
        nodes = (user.get("extra") or {}).get(NODE_NAME_EXTRA) or []
        if username not in self._service_accounts or len(nodes) != 1 or not isinstance(nodes[0], str):
            log.info("token review: not an agent", user=username, nodes=len(nodes))
            return None
        node = nodes[0]
        return Principal(name=node, role=Role.AGENT, method=AuthMethod.KUBERNETES, node=node)


def credentials_from_file(path: Path) -> Callable[[], str]:
    """The aggregator's own ServiceAccount token, read afresh each time (the kubelet rotates it)."""

    def read() -> str:
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    return read
