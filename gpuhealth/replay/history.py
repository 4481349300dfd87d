"""The fleet's recorded history as a self-contained file (``gpuhealth export``), the input of a replay.

Format ``gpuhealth.history/v1``: the nodes (name, orchestrator, GPUs, reading interval, profile) and the
aggregator's events of the window, oldest first, exactly as ``/v1/events`` serves them. What the replay reads
from the events: ``findings`` rows (the non-ok findings a node reported each time they changed, with
``reported_at``, when the agent read them), ``breaker_reset`` rows (a human's reset), and, for the "did"
column, ``action``, ``permit_refused``, ``breaker_tripped``, ``incident_opened`` / ``incident_closed``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.aggregator_api import Event

SCHEMA = "gpuhealth.history/v1"


class HistoryNode(BaseModel):
    """One node as the aggregator knows it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    orchestrator: str = "kubernetes"
    gpu_count: int = 8
    interval_s: float | None = None
    profile: str | None = None


class History(BaseModel):
    """A window of the fleet's history."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    schema_: Literal["gpuhealth.history/v1"] = Field(default="gpuhealth.history/v1", alias="schema")
    exported_at: datetime
    since: datetime
    until: datetime
    nodes: list[HistoryNode]
    events: list[Event]


class HistoryError(ValueError):
    """An unreadable or invalid history file; the message is one line naming the file."""


def read_history(path: Path) -> History:
    """The history file at ``path``; raises HistoryError with one line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise HistoryError(f"{path}: not JSON (line {exc.lineno})") from None
    try:
        return History.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise HistoryError(f"{path}: {where}: {' '.join(str(first['msg']).split())}") from None


def write_history(history: History, path: Path | None) -> str:
    """The history as JSON text, also written to ``path`` when given."""
    text = history.model_dump_json(by_alias=True, indent=None) + "\n"
    if path is not None:
        path.write_text(text, encoding="utf-8")
    return text
