"""A fleet of identities for the authorization tests: two agents, a viewer, an operator and an admin, each
with its own random token, written to a token file as SHA-256 hashes (as a mounted Secret would hold them)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient
from core.clock import ManualClock

AGENT_NODE = "gpu-node-3"
OTHER_NODE = "gpu-node-7"


@dataclass(frozen=True)
class Identity:
    """One entry of the token file, with the plain token the test sends."""

    name: str
    role: str
    node: str | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def entry(self) -> dict[str, str]:
        """The token file's entry: the hash, never the token."""
        entry = {
            "name": self.name,
            "role": self.role,
            "sha256": hashlib.sha256(self.token.encode()).hexdigest(),
        }
        if self.node is not None:
            entry["node"] = self.node
        return entry


@dataclass(frozen=True)
class Identities:
    """Everyone the tests act as."""

    agent: Identity = field(default_factory=lambda: Identity(AGENT_NODE, "agent", AGENT_NODE))
    other_agent: Identity = field(default_factory=lambda: Identity(OTHER_NODE, "agent", OTHER_NODE))
    viewer: Identity = field(default_factory=lambda: Identity("ana", "viewer"))
    operator: Identity = field(default_factory=lambda: Identity("olga", "operator"))
    admin: Identity = field(default_factory=lambda: Identity("adam", "admin"))

    def write(self, path: Path) -> Path:
        """The token file holding every identity."""
        everyone = [self.agent, self.other_agent, self.viewer, self.operator, self.admin]
        path.write_text(yaml.safe_dump({"tokens": [who.entry() for who in everyone]}), encoding="utf-8")
        return path


def start_with_identities(
    tmp_path: Path, identities: Identities, *, token: str | None = None, **settings: object
) -> tuple[LiveAggregator, ManualClock]:
    """A live aggregator (uvicorn on 127.0.0.1) that knows the token file's identities (and, with ``token``,
    the deprecated shared token)."""
    clock = ManualClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    token_file = identities.write(tmp_path / "tokens.yaml")
    live = LiveAggregator(tmp_path / "aggregator.db", clock, token, token_file=token_file, **settings)
    return live.start(), clock


def client_as(live: LiveAggregator, who: Identity) -> AggregatorClient:
    """The real client, sending ``who``'s token."""
    return AggregatorClient(live.url, who.token, timeout_s=5.0, retries=1)
