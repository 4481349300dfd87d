"""People authenticated by an OpenID Connect issuer (the company's SSO): the CLI sends the person's ID
token; the aggregator verifies it against the issuer's keys (``jwks_uri`` from its discovery document), its
issuer, audience and expiry, and maps the person's groups to a role (the highest one matched). A person
whose groups map to no role is not let in. OIDC identities are people only: never agents.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import httpx
import jwt
import structlog

from aggregator.auth.answer_cache import UNKNOWN, AnswerCache, Unknown
from aggregator.auth.principal import AuthMethod, Principal, Role

log = structlog.get_logger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
ALGORITHMS = ["RS256", "ES256", "EdDSA"]  # asymmetric only: a shared-secret HS256 token proves nothing here
CACHE_TTL_S = 60.0
DISCOVERY_RETRY_S = 30.0  # a failed discovery is not tried again sooner: no request waits on it meanwhile
NAME_PREFIX = "oidc:"  # a person's name, told apart from the token file's names in requested_by and audit
MAX_CACHED = 10_000


class OidcAuthenticator:
    """People by OIDC ID token, with roles from a group-to-role map."""

    def __init__(
        self,
        issuer: str,
        *,
        audience: str,
        role_map: Mapping[str, str],
        name_claim: str = "email",
        groups_claim: str = "groups",
        clock: Callable[[], float] = time.time,
        timeout_s: float = 5.0,
    ) -> None:
        self._issuer = issuer.rstrip("/")
        self._audience = audience
        self._role_map = {group: Role(role) for group, role in role_map.items()}
        self._name_claim = name_claim
        self._groups_claim = groups_claim
        self._timeout_s = timeout_s
        self._lock = threading.Lock()  # guards the lazily discovered JWKS client
        self._jwks: jwt.PyJWKClient | None = None
        self._clock = clock
        self._discovery_retry_at = 0.0
        self._answers = AnswerCache(clock, MAX_CACHED)

    def known_answer(self, token: str) -> Principal | Unknown | None:
        if token.count(".") != 2:
            return None
        return self._answers.get(token)

    def authenticate(self, token: str) -> Principal | None:
        if token.count(".") != 2:
            return None
        cached = self._answers.get(token)
        if cached is not UNKNOWN:
            return cached
        now = self._answers.now()
        verified = self._verify(token)
        if verified is None:
            return None  # not remembered: a refused ID token costs a signature check, no remote call
        principal, expires = verified
        self._answers.put(token, principal, min(expires, now + CACHE_TTL_S))
        return principal

    def _verify(self, token: str) -> tuple[Principal, float] | None:
        try:
            signing_key = self._keys().get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                signing_key.key,
                algorithms=ALGORITHMS,
                audience=self._audience,
                issuer=self._issuer,
                options={"require": ["exp", "iss", "aud", self._name_claim]},
            )
        except (jwt.PyJWTError, httpx.HTTPError, ValueError, KeyError, DiscoveryFailed) as exc:
            log.info("oidc token refused", reason=type(exc).__name__)
            return None
        groups = claims.get(self._groups_claim) or []
        groups = [groups] if isinstance(groups, str) else [g for g in groups if isinstance(g, str)]
        roles = [self._role_map[group] for group in groups if group in self._role_map]
        name = NAME_PREFIX + str(claims[self._name_claim])[: 128 - len(NAME_PREFIX)]
        if not roles:
            log.info("oidc person has no role", person=name)
            return None
        role = max(roles, key=lambda candidate: candidate.rank)
        return Principal(name=name, role=role, method=AuthMethod.OIDC), float(claims["exp"])

    def _keys(self) -> jwt.PyJWKClient:
        """The issuer's key set client, from its discovery document (fetched once; a failure is remembered
        for ``DISCOVERY_RETRY_S``, so a down issuer costs one attempt, not one per request)."""
        with self._lock:
            if self._jwks is not None:
                return self._jwks
            if self._clock() < self._discovery_retry_at:
                raise DiscoveryFailed("discovery failed recently")
        try:
            response = httpx.get(self._issuer + DISCOVERY_PATH, timeout=self._timeout_s)
            response.raise_for_status()
            jwks_uri = str(response.json()["jwks_uri"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            with self._lock:
                self._discovery_retry_at = self._clock() + DISCOVERY_RETRY_S
            log.warning("oidc discovery failed", error=type(exc).__name__, retry_in_s=DISCOVERY_RETRY_S)
            raise DiscoveryFailed(type(exc).__name__) from exc
        client = jwt.PyJWKClient(
            jwks_uri, cache_keys=True, lifespan=300, timeout=int(self._timeout_s), cooldown_duration=30
        )
        with self._lock:
            self._jwks = client
        return client


class DiscoveryFailed(Exception):
    """The issuer's discovery document could not be read (now, or recently)."""
