"""``POST /apis/authentication.k8s.io/v1/tokenreviews`` as the API server answers it, for tokens the test
issued here (as the kubelet would project a ServiceAccount token into a pod on a node).

A projected token's review names its ServiceAccount user and, in ``extra``, the node the pod runs on
(``authentication.kubernetes.io/node-name``); it is authenticated only for the audiences it was issued for
(none asked: any of them). Anything else is ``authenticated: false``.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class IssuedToken:
    """Who a token stands for."""

    username: str
    node: str | None
    audiences: tuple[str, ...]


class TokenReviewer:
    """Issues tokens and reviews them; counts the reviews (to show a caller caches)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, IssuedToken] = {}
        self.reviews = 0

    def issue(self, service_account: str, *, node: str | None, audiences: tuple[str, ...]) -> str:
        """A new token for ``namespace:name`` (the ServiceAccount) running on ``node``."""
        namespace, _, name = service_account.partition(":")
        token = secrets.token_urlsafe(48)
        with self._lock:
            self._tokens[token] = IssuedToken(f"system:serviceaccount:{namespace}:{name}", node, audiences)
        return token

    def revoke(self, token: str) -> None:
        """The pod went away: its token no longer authenticates."""
        with self._lock:
            self._tokens.pop(token, None)

    def review(self, body: Any) -> dict[str, Any]:
        """The TokenReview object with its status filled in."""
        spec = body.get("spec") if isinstance(body, dict) else None
        token = spec.get("token") if isinstance(spec, dict) else None
        wanted = spec.get("audiences") if isinstance(spec, dict) else None
        with self._lock:
            self.reviews += 1
            issued = self._tokens.get(token) if isinstance(token, str) else None
        status: dict[str, Any] = {"authenticated": False}
        if issued is not None:
            audiences = [a for a in wanted or issued.audiences if a in issued.audiences]
            if audiences:
                extra = {NODE_NAME_EXTRA: [issued.node]} if issued.node else {}
                status = {
                    "authenticated": True,
                    "user": {
                        "username": issued.username,
                        "groups": ["system:serviceaccounts"],
                        "extra": extra,
                    },
                    "audiences": audiences,
                }
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": spec or {},
            "status": status,
        }
