"""The demo's identities, as a fleet should have them: every simulated node's agent its own token (role
``agent``, bound to its node) and the on-call side an admin token; the aggregator gets only their hashes.

All are throw-away: made fresh for each run, written into the run's temporary directory.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from aggregator.auth.token_file import token_sha256

ADMIN_NAME = "demo-oncall"


@dataclass(frozen=True)
class DemoIdentities:
    """The admin's token and one token per node."""

    admin_token: str
    agent_tokens: dict[str, str]

    @classmethod
    def fresh(cls, nodes: list[str]) -> DemoIdentities:
        """New random tokens for the on-call side and for every node."""
        return cls(
            admin_token=secrets.token_urlsafe(32),
            agent_tokens={node: secrets.token_urlsafe(32) for node in nodes},
        )

    def write_token_file(self, path: Path) -> Path:
        """The aggregator's token file (JSON, hashes only)."""
        entries = [{"name": ADMIN_NAME, "role": "admin", "sha256": token_sha256(self.admin_token)}]
        entries += [
            {"name": node, "role": "agent", "node": node, "sha256": token_sha256(token)}
            for node, token in self.agent_tokens.items()
        ]
        path.write_text(json.dumps({"tokens": entries}), encoding="utf-8")
        path.chmod(0o600)
        return path

    def write_agent_tokens(self, directory: Path) -> dict[str, Path]:
        """One token file per node, as each node's Secret would hold it."""
        directory.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for node, token in self.agent_tokens.items():
            path = directory / f"{node}.token"
            path.write_text(token, encoding="utf-8")
            path.chmod(0o600)
            paths[node] = path
        return paths
