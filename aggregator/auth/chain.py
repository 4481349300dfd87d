"""The chain of authenticators the aggregator asks, in order, who sent a request.

Built once from the settings: the token file's identities first, then the deprecated shared token. With
no token at all, ``allow_anonymous`` admits loopback clients only (the local demo) as an admin.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass

import structlog

from aggregator.auth.answer_cache import UNKNOWN
from aggregator.auth.authenticators import Authenticator, SharedTokenAuthenticator, TokenFileAuthenticator
from aggregator.auth.kubernetes import TokenReviewAuthenticator, credentials_from_file
from aggregator.auth.nomad import NomadIdentityAuthenticator
from aggregator.auth.oidc import OidcAuthenticator
from aggregator.auth.principal import AuthMethod, Principal, Role
from aggregator.auth.token_file import load_token_file
from aggregator.auth.unauthorized_log import UnauthorizedLog
from aggregator.settings import AggregatorSettings
from core.settings import SettingsError

log = structlog.get_logger(__name__)

ANONYMOUS = Principal(name="anonymous", role=Role.ADMIN, method=AuthMethod.ANONYMOUS, any_node=True)


class NotAuthenticated(Exception):
    """No authenticator knows the caller; the message says why without repeating any token."""


@dataclass(frozen=True)
class Caller:
    """Who called (the principal) and from where (the client address the audit log records)."""

    principal: Principal
    client: str


class AuthChain:
    """Authenticators in order; the first that knows the token names the caller."""

    def __init__(
        self,
        authenticators: list[Authenticator],
        *,
        allow_anonymous: bool = False,
        unauthorized_log: UnauthorizedLog | None = None,
    ) -> None:
        self._authenticators = authenticators
        self._allow_anonymous = allow_anonymous
        self._unauthorized = unauthorized_log or UnauthorizedLog()

    def resolve(self, token: str | None, client: str) -> Caller:
        """The caller of a request with this bearer ``token`` (None: no Authorization header)."""
        if token:
            for authenticator in self._authenticators:
                principal = authenticator.authenticate(token)
                if principal is not None:
                    return Caller(principal, client)
            self._refuse(client, "unknown token")
        if self._allow_anonymous and is_loopback(client):
            return Caller(ANONYMOUS, client)
        self._refuse(client, "no token")
        raise AssertionError("unreachable")  # pragma: no cover - _refuse raises

    def resolve_known(self, token: str | None, client: str) -> Caller | None:
        """:meth:`resolve` from what is known without asking another server; None: ask (in a thread).

        Refusals are decided here too when every authenticator already knows its answer.
        """
        if token:
            for authenticator in self._authenticators:
                principal = authenticator.known_answer(token)
                if principal is UNKNOWN:
                    return None
                if principal is not None:
                    return Caller(principal, client)
        return self.resolve(token, client)  # nothing left that could block: the usual answer or refusal

    def _refuse(self, client: str, reason: str) -> None:
        self._unauthorized.refused(client, reason)
        raise NotAuthenticated("missing or wrong bearer token")


def is_loopback(client: str) -> bool:
    """Whether the client address is this machine's own (127.0.0.0/8 or ::1)."""
    try:
        return ipaddress.ip_address(client).is_loopback
    except ValueError:
        return False


def build_chain(settings: AggregatorSettings) -> AuthChain:
    """The chain the settings describe; raises TokenFileError for a bad token file."""
    authenticators: list[Authenticator] = []
    if settings.token_file is not None:
        entries = load_token_file(settings.token_file)
        authenticators.append(TokenFileAuthenticator(entries))
        log.info("token file loaded", identities=len(entries))
    if settings.token is not None:  # its minimum length is enforced by the settings
        log.warning(
            "the shared token is deprecated: whoever holds it may act as any node (docs/security.md)",
            role=settings.token_role,
        )
        authenticators.append(
            SharedTokenAuthenticator(settings.token.get_secret_value(), Role(settings.token_role))
        )
    if settings.kubernetes_api_url:
        authenticators.append(_token_review(settings, settings.kubernetes_api_url))
        log.info("kubernetes token review on", audience=settings.kubernetes_audience)
    if settings.nomad_address:
        nomad_token = settings.nomad_token_file
        authenticators.append(
            NomadIdentityAuthenticator(
                settings.nomad_address,
                audience=settings.nomad_audience,
                agent_jobs=list(settings.nomad_agent_jobs),
                agent_namespace=settings.nomad_agent_namespace,
                credentials=credentials_from_file(nomad_token) if nomad_token else lambda: None,
            )
        )
        log.info("nomad workload identities on", audience=settings.nomad_audience)
    if settings.oidc_issuer:
        authenticators.append(
            OidcAuthenticator(
                settings.oidc_issuer,
                audience=settings.oidc_audience,
                role_map=dict(settings.oidc_role_map),
                name_claim=settings.oidc_name_claim,
                groups_claim=settings.oidc_groups_claim,
            )
        )
        log.info("oidc people on", issuer=settings.oidc_issuer, groups=len(settings.oidc_role_map))
    return AuthChain(authenticators, allow_anonymous=settings.allow_anonymous)


def _token_review(settings: AggregatorSettings, api_url: str) -> TokenReviewAuthenticator:
    """The TokenReview authenticator; a CA file that cannot be loaded is a SettingsError naming it."""
    ca = settings.kubernetes_ca_file
    try:
        return TokenReviewAuthenticator(
            api_url,
            credentials_from_file(settings.kubernetes_token_file),
            audience=settings.kubernetes_audience,
            service_accounts=list(settings.kubernetes_agent_service_accounts),
            foreign_issuers=(settings.oidc_issuer,) if settings.oidc_issuer else (),
            verify=str(ca) if ca is not None else True,
        )
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"cannot load kubernetes_ca_file {ca}: {exc.strerror or exc}") from None
