"""The authenticated caller of one request: a node's agent or a person (or automation) with a role."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a caller may do. People's roles are ordered (viewer < operator < admin); ``agent`` stands apart:
    it acts for one node and nothing else."""

    AGENT = "agent"
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """Order of the people's roles; an agent ranks below every one of them."""
        return _RANKS[self]


_RANKS = {Role.AGENT: 0, Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


class AuthMethod(StrEnum):
    """How the caller proved who it is (recorded in the audit log)."""

    TOKEN_FILE = "token_file"  # noqa: S105 - a method's name, not a secret
    SHARED_TOKEN = "shared_token"  # noqa: S105 - a method's name, not a secret
    ANONYMOUS = "anonymous"
    KUBERNETES = "kubernetes"  # a TokenReview of the agent's ServiceAccount token
    NOMAD = "nomad"  # the agent task's Nomad workload identity (a JWT)
    OIDC = "oidc"  # a person's ID token from the OpenID Connect issuer


@dataclass(frozen=True)
class Principal:
    """One caller. ``node`` is set for an agent: the only node it may act for.

    ``any_node`` marks the compatibility identities (the deprecated shared token, the loopback demo) that
    may still act as any node's agent, as every caller could before per-node identities existed.
    """

    name: str
    role: Role
    method: AuthMethod
    node: str | None = None
    any_node: bool = False

    def describe(self) -> str:
        """``agent gpu-node-3`` or ``operator ana``: how refusals name the caller."""
        return f"{self.role.value} {self.name}"

    def may_act_for(self, node: str) -> bool:
        """Whether this caller may speak as ``node``'s agent (report, permits, acknowledgements)."""
        return self.any_node or (self.role is Role.AGENT and self.node == node)

    def has_role(self, needed: Role) -> bool:
        """Whether this caller is a person (or automation) with ``needed`` or a higher role."""
        return self.role is not Role.AGENT and self.role.rank >= needed.rank
