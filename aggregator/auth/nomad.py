"""Agents authenticated by Nomad workload identity: the agent task sends its JWT (``identity`` block with an
audience of our own), signed by the Nomad servers; the aggregator verifies it against the servers' public
keys (``/.well-known/jwks.json``), then asks the API which node the claimed allocation runs on.

A token is an agent's only if its signature, audience and expiry hold, its namespace is the agent jobs'
namespace (``nomad_agent_namespace``) and its job one of the agent jobs, and its allocation, looked up in that
namespace, exists, belongs to that namespace and job and is placed on a node: the agent acts for that node
only. The namespace is the aggregator's, never the token's: a tenant who may submit jobs in another
namespace (one the aggregator may read, to requeue its jobs) and names one like the agent is no agent.
Answers are cached (by the token's hash) until the token expires or for a minute, whichever comes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import structlog

from aggregator.auth.answer_cache import UNKNOWN, AnswerCache, Unknown
from aggregator.auth.principal import AuthMethod, Principal, Role

log = structlog.get_logger(__name__)

JWKS_PATH = "/.well-known/jwks.json"
ALGORITHMS = ["ES256", "RS256", "EdDSA"]  # what Nomad signs with; never "none" or a symmetric one
CACHE_TTL_S = 60.0
NEGATIVE_CACHE_TTL_S = 10.0
MAX_CACHED = 100_000


class NomadIdentityAuthenticator:
    """Agents by Nomad workload identity (JWT + JWKS + the allocation's node)."""

    def __init__(
        self,
        address: str,
        *,
        audience: str,
        agent_jobs: list[str],
        agent_namespace: str = "default",
        credentials: Callable[[], str | None] = lambda: None,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        jwks_client: jwt.PyJWKClient | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base = address.rstrip("/")
        self._jwks = jwks_client or jwt.PyJWKClient(
            base + JWKS_PATH, cache_keys=True, lifespan=300, timeout=5, cooldown_duration=30
        )
        self._http = httpx.Client(base_url=base, timeout=timeout_s, transport=transport)
        self._audience = audience
        self._agent_jobs = frozenset(agent_jobs)
        self._namespace = agent_namespace
        self._credentials = credentials
        self._answers = AnswerCache(clock, MAX_CACHED)

    def known_answer(self, token: str) -> Principal | Unknown | None:
        if token.count(".") != 2:
            return None
        return self._answers.get(token)

    def authenticate(self, token: str) -> Principal | None:
        if token.count(".") != 2:  # not a JWT: some other authenticator's token
            return None
        cached = self._answers.get(token)
        if cached is not UNKNOWN:
            return cached
        now = self._answers.now()
        answered, principal, expires = self._verify(token)
        if not answered:
            return None
        until = min(expires, now + CACHE_TTL_S) if principal is not None else now + NEGATIVE_CACHE_TTL_S
        self._answers.put(token, principal, until)
        return principal

    def _verify(self, token: str) -> tuple[bool, Principal | None, float]:
        """Whether Nomad answered, the agent the token is (None: not one), and when the token expires."""
        try:
            signing_key = self._jwks.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("nomad keys unavailable", error=type(exc).__name__)
            return False, None, 0.0
        except jwt.PyJWTError:
            return True, None, 0.0  # no key of the servers signed this
        try:
            claims = jwt.decode(
                token,
                signing_key.key,
                algorithms=ALGORITHMS,
                audience=self._audience,
                options={"require": ["exp", "aud", "nomad_allocation_id", "nomad_job_id"]},
            )
        except jwt.PyJWTError as exc:
            log.info("nomad identity refused", reason=type(exc).__name__)
            return True, None, 0.0
        if not self._of_an_agent_job(claims):
            return True, None, 0.0
        answered, node = self._node_of(claims)
        if node is None:
            return answered, None, 0.0
        principal = Principal(name=node, role=Role.AGENT, method=AuthMethod.NOMAD, node=node)
        return True, principal, float(claims["exp"])

    def _of_an_agent_job(self, claims: dict[str, Any]) -> bool:
        """Whether the token is of an agent job in the agents' namespace (never the one it names only)."""
        namespace = claims.get("nomad_namespace") or "default"
        if namespace != self._namespace:
            log.info("nomad identity: not the agents' namespace", namespace=str(namespace)[:128])
            return False
        if claims["nomad_job_id"] not in self._agent_jobs:
            log.info("nomad identity: not an agent job", job=str(claims["nomad_job_id"])[:128])
            return False
        return True

    def _node_of(self, claims: dict[str, Any]) -> tuple[bool, str | None]:
        """The name of the node the claimed allocation of the claimed job is placed on."""
        headers = {"X-Nomad-Token": token} if (token := self._credentials()) else {}
        try:
            response = self._http.get(
                f"/v1/allocation/{claims['nomad_allocation_id']}",
                params={"namespace": self._namespace},
                headers=headers,
            )
            if response.status_code == 404:
                return True, None
            response.raise_for_status()
            allocation = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("nomad allocation lookup failed", error=type(exc).__name__)
            return False, None
        if not isinstance(allocation, dict) or allocation.get("JobID") != claims["nomad_job_id"]:
            return True, None
        if allocation.get("Namespace", "default") != self._namespace:
            return True, None
        node = allocation.get("NodeName")
        return True, node if isinstance(node, str) and node else None
