"""Authorization rules: what each kind of caller may do. Every refusal is one line naming the rule.

- An agent acts for its own node only: reports, permits (request, renew, release), reading and
  acknowledging that node's requests, reading that node's record. Nothing else.
- People (and automation) by role: viewer reads; operator also quarantines, releases, runs diagnostics,
  silences and retries alerts; admin also resets the breaker and forgets nodes.
- The compatibility identities (shared token, loopback demo) may also act as any node's agent.
"""

from __future__ import annotations

from aggregator.auth.principal import Principal, Role

AGENT_SCOPE = "agents may only report, use permits and read their own node and its requests"


class Forbidden(Exception):
    """The caller is authenticated but may not do this (HTTP 403); the message names the rule."""


def require_role(principal: Principal, needed: Role, what: str) -> None:
    """Refuse unless the caller is a person with ``needed`` or a higher role; ``what`` reads "reset the
    breaker"."""
    if principal.has_role(needed):
        return
    if principal.role is Role.AGENT:
        raise Forbidden(f"{principal.describe()} may not {what}: {AGENT_SCOPE}")
    raise Forbidden(f"{principal.describe()} may not {what}: that needs the {needed.value} role")


def require_agent_of(principal: Principal, node: str, what: str) -> None:
    """Refuse unless the caller may speak as ``node``'s agent; ``what`` reads "report"."""
    if principal.may_act_for(node):
        return
    if principal.role is Role.AGENT:
        raise Forbidden(f"{principal.describe()} may only {what} for its own node, not {node}")
    raise Forbidden(f"{principal.describe()} may not {what}: only the node's own agent may")


def require_agent_or_role(principal: Principal, node: str, needed: Role, what: str) -> None:
    """Allow the node's own agent, or a person with ``needed`` or a higher role."""
    if principal.role is Role.AGENT or principal.any_node:
        require_agent_of(principal, node, what)
        return
    require_role(principal, needed, what)
