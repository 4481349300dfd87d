"""ACL tokens and policies, as far as the endpoints the emulator serves need them.

Policy rules (Nomad docs, "ACL policy specification") are HCL or the equivalent JSON: ``namespace "<glob>"
{ policy = "deny|read|write|scale" capabilities = [...] }``, ``node { policy = ... }``, ``agent { policy =
... }``, ``operator``/``plugin``/``quota``/``host_volume`` (parsed, unused). A namespace policy expands to
its documented capability list; explicit capabilities add to it; ``deny`` anywhere wins. A request without
``X-Nomad-Token`` runs as the anonymous token, which has no policy here; an unknown secret is refused with
"ACL token not found"; every other refusal is 403 "Permission denied".
"""

from __future__ import annotations

import fnmatch
import json
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import hcl2

from sim.nomad import errors
from sim.nomad.model import JsonDict, rfc3339

_LEVELS: Final = {"deny": -1, "": 0, "read": 1, "write": 2}
_NAMESPACE_READ: Final = (
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "read-job-scaling",
    "list-scaling-policies",
    "read-scaling-policy",
)
_NAMESPACE_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    "deny": ("deny",),
    "read": _NAMESPACE_READ,
    "write": (
        *_NAMESPACE_READ,
        "scale-job",
        "submit-job",
        "dispatch-job",
        "read-logs",
        "read-fs",
        "alloc-exec",
        "alloc-lifecycle",
        "csi-write-volume",
        "csi-mount-volume",
        "submit-recommendation",
    ),
    "scale": ("list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job"),
}


class PolicyError(ValueError):
    """Rules that are neither valid HCL nor JSON, or name an unknown policy level."""


@dataclass
class Policy:
    """Parsed rules: namespace globs to capabilities, and the node/agent levels."""

    name: str
    rules: str
    namespaces: dict[str, set[str]] = field(default_factory=dict)
    node: str = ""
    agent: str = ""


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, list):
        return [_unquote(item) for item in value]
    return value


def _blocks(tree: Any, key: str) -> list[Any]:
    """A top-level block from python-hcl2's output (a list of blocks) or from JSON (one object)."""
    value = tree.get(key)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _level(value: Any, where: str) -> str:
    level = str(_unquote(value or ""))
    if level not in _LEVELS and level != "scale":
        raise PolicyError(f"invalid {where} policy level {level!r}")
    return level


def parse_policy(name: str, rules: str) -> Policy:
    """Parse HCL or JSON policy rules."""
    try:
        tree: Any = json.loads(rules)
    except ValueError:
        try:
            tree = hcl2.loads(rules)
        except Exception as error:  # noqa: BLE001 - python-hcl2 raises lark errors of many kinds
            raise PolicyError(
                f"policy rules are neither HCL nor JSON: {str(error).splitlines()[0]}"
            ) from None
    if not isinstance(tree, dict):
        raise PolicyError("policy rules must be an object")
    policy = Policy(name, rules)
    for block in _blocks(tree, "namespace"):
        for glob, raw_body in block.items():
            body = raw_body if isinstance(raw_body, dict) else {}
            level = _level(body.get("policy"), f"namespace {glob}")
            capabilities = set(_NAMESPACE_CAPABILITIES.get(level, ()))
            capabilities.update(str(c) for c in _unquote(body.get("capabilities") or []))
            policy.namespaces[str(_unquote(glob))] = capabilities
    for kind in ("node", "agent"):
        for block in _blocks(tree, kind):
            body = block if isinstance(block, dict) else {}
            setattr(policy, kind, _level(body.get("policy"), kind))
    return policy


@dataclass
class Token:
    """An ACL token; ``management`` tokens may do everything."""

    accessor_id: str
    secret_id: str
    name: str
    type: str
    policies: list[str]
    create_time: datetime
    create_index: int

    def to_api(self) -> JsonDict:
        """The token as ``/v1/acl/token`` endpoints show it."""
        return {
            "AccessorID": self.accessor_id,
            "SecretID": self.secret_id,
            "Name": self.name,
            "Type": self.type,
            "Policies": list(self.policies),
            "Global": False,
            "CreateTime": rfc3339(self.create_time),
            "CreateIndex": self.create_index,
            "ModifyIndex": self.create_index,
        }


class Acl:
    """Tokens, policies and the permission checks; disabled means every request is allowed."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._policies: dict[str, Policy] = {}
        self._tokens: dict[str, Token] = {}  # by secret

    def bootstrap(self, now: datetime, index: int) -> Token:
        """Create the management token (once)."""
        return self.add_token("Bootstrap Token", "management", [], now, index)

    def add_token(self, name: str, type_: str, policies: list[str], now: datetime, index: int) -> Token:
        """Create a token; its secret is random."""
        if type_ not in ("client", "management"):
            raise errors.bad_request(f"token type must be client or management, not {type_!r}")
        token = Token(
            str(uuid.uuid4()),
            str(uuid.UUID(bytes=secrets.token_bytes(16))),
            name,
            type_,
            policies,
            now,
            index,
        )
        with self._lock:
            self._tokens[token.secret_id] = token
        return token

    def set_policy(self, name: str, rules: str) -> Policy:
        """Create or replace a named policy."""
        policy = parse_policy(name, rules)
        with self._lock:
            self._policies[name] = policy
        return policy

    def policy(self, name: str) -> Policy:
        """A policy by name (404 when missing)."""
        with self._lock:
            policy = self._policies.get(name)
        if policy is None:
            raise errors.not_found("ACL policy")
        return policy

    def policies(self) -> list[Policy]:
        """Every policy."""
        with self._lock:
            return list(self._policies.values())

    def delete_policy(self, name: str) -> None:
        """Forget a policy (tokens naming it lose what it granted)."""
        with self._lock:
            self._policies.pop(name, None)

    def tokens(self) -> list[Token]:
        """Every token."""
        with self._lock:
            return list(self._tokens.values())

    def token_by_accessor(self, accessor: str) -> Token:
        """A token by accessor ID (404 when missing)."""
        with self._lock:
            for token in self._tokens.values():
                if token.accessor_id == accessor:
                    return token
        raise errors.not_found("ACL token")

    def delete_token(self, accessor: str) -> None:
        """Revoke a token."""
        token = self.token_by_accessor(accessor)
        with self._lock:
            self._tokens.pop(token.secret_id, None)

    def resolve(self, secret: str | None) -> Token | None:
        """The caller's token; None for anonymous; 403 "ACL token not found" for an unknown secret."""
        if not secret:
            return None
        with self._lock:
            token = self._tokens.get(secret)
        if token is None:
            raise errors.NomadApiError(403, "ACL token not found")
        return token

    def _policies_of(self, token: Token | None) -> list[Policy]:
        if token is None:
            return [p for p in self.policies() if p.name == "anonymous"]
        with self._lock:
            return [self._policies[name] for name in token.policies if name in self._policies]

    def require_management(self, secret: str | None) -> None:
        """Only a management token passes (ACL administration endpoints)."""
        if not self.enabled:
            return
        token = self.resolve(secret)
        if token is None or token.type != "management":
            raise errors.permission_denied()

    def require(
        self,
        secret: str | None,
        *,
        node: str = "",
        agent: str = "",
        namespace: str = "",
        capability: str = "",
    ) -> None:
        """403 unless the caller's policies grant the node/agent level and the namespace capability."""
        if not self.enabled:
            return
        token = self.resolve(secret)
        if token is not None and token.type == "management":
            return
        policies = self._policies_of(token)
        if node and not _grants_level([p.node for p in policies], node):
            raise errors.permission_denied()
        if agent and not _grants_level([p.agent for p in policies], agent):
            raise errors.permission_denied()
        if capability and not _grants_capability(policies, namespace or "default", capability):
            raise errors.permission_denied()


def _grants_level(levels: list[str], wanted: str) -> bool:
    if "deny" in levels:
        return False
    best = max((_LEVELS.get(level, 0) for level in levels), default=0)
    return best >= _LEVELS[wanted]


def _grants_capability(policies: list[Policy], namespace: str, capability: str) -> bool:
    granted: set[str] = set()
    for policy in policies:
        exact = policy.namespaces.get(namespace)
        if exact is not None:
            granted |= exact
            continue
        for glob, capabilities in policy.namespaces.items():
            if fnmatch.fnmatchcase(namespace, glob):
                granted |= capabilities
    return "deny" not in granted and capability in granted
