"""What every settings model shares: the section base class, the one settings error, the node's name.

The agent's, the checks', the recovery's, the Nomad executor's and the aggregator's settings are pydantic
models read from YAML and the environment; each section refuses unknown keys (a typo is an error, never a
silently ignored value) and is frozen (settings are read once, then passed around).
"""

from __future__ import annotations

import os
import socket

from pydantic import BaseModel, ConfigDict


class SettingsError(ValueError):
    """Invalid settings; the message is one line naming the file (or variable) and the bad field."""


class SettingsSection(BaseModel):
    """One section of a settings file: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def default_node_name() -> str:
    """The node's name: ``NODE_NAME`` (the DaemonSet sets it from the downward API), else the hostname."""
    return os.environ.get("NODE_NAME") or socket.gethostname()
