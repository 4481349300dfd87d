"""The agent's durable outbox of reports to the aggregator, and its persisted sequence numbers.

Nothing may be lost (docs/agent.md, "The aggregator link"): a report is written here *before* it is sent
and removed only once the aggregator acknowledged it, so an outage or an agent restart leaves unsent reports
waiting on disk, delivered in order later. The aggregator ignores a report whose ``seq`` is not above the
last it accepted, so the last sequence number handed out is stored in the same file and a restarted agent
continues above it.

Bounded: heartbeats carry no news, so a queued heartbeat followed by another is replaced by the newer one;
every state change is kept. Past ``max_reports`` the oldest heartbeats go first, then (logged as an error)
the oldest changes, so a node cut off for days cannot fill its disk.

Writes are atomic (temporary file, fsync, rename, directory fsync), as for the state file.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuhealth.core.aggregator_api import Report

log = structlog.get_logger(__name__)

OUTBOX_SCHEMA_VERSION = 1
DEFAULT_MAX_REPORTS = 1000


class OutboxError(Exception):
    """The outbox could not be written (disk full, directory missing or read-only)."""


class QueuedReport(BaseModel):
    """One report waiting for the aggregator's acknowledgement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    heartbeat: bool = Field(description="True when the report only repeats what the previous one said.")
    report: Report


class _OutboxFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = OUTBOX_SCHEMA_VERSION
    last_seq: int = 0
    queued: list[QueuedReport] = Field(default_factory=list)


@dataclass(frozen=True)
class OutboxStats:
    """How many reports wait, and how many were dropped to keep the outbox bounded."""

    queued: int
    dropped: int


class ReportOutbox:
    """A JSON file of queued reports plus the last sequence number; safe to use from two threads."""

    def __init__(self, path: Path | str, *, max_reports: int = DEFAULT_MAX_REPORTS) -> None:
        self._path = Path(path)
        self._max = max(2, max_reports)
        self._lock = threading.Lock()
        self._dropped = 0
        self._content = self._load()

    @property
    def path(self) -> Path:
        """Where the outbox lives."""
        return self._path

    def next_seq(self, now_ms: int) -> int:
        """The next sequence number: above every one handed out before (also before a restart), and not
        below ``now_ms`` so a lost outbox file still yields numbers above what the aggregator saw."""
        with self._lock:
            seq = max(self._content.last_seq + 1, now_ms)
            self._content = self._content.model_copy(update={"last_seq": seq})
            return seq

    def append(self, report: Report, *, heartbeat: bool) -> None:
        """Queue ``report`` durably (written before this returns); raises OutboxError when it cannot be."""
        with self._lock:
            queued = list(self._content.queued)
            if heartbeat and queued and queued[-1].heartbeat:
                queued.pop()  # an unsent heartbeat is superseded by the newer one
            queued.append(QueuedReport(heartbeat=heartbeat, report=report))
            queued = self._bounded(queued)
            self._content = self._content.model_copy(update={"queued": queued})
            self._write()

    def pending(self) -> list[Report]:
        """The queued reports, oldest first."""
        with self._lock:
            return [entry.report for entry in self._content.queued]

    def remove_through(self, seq: int) -> None:
        """Forget every queued report with a sequence number up to ``seq`` (acknowledged)."""
        with self._lock:
            kept = [entry for entry in self._content.queued if entry.report.seq > seq]
            if len(kept) == len(self._content.queued):
                return
            self._content = self._content.model_copy(update={"queued": kept})
            self._write()

    def stats(self) -> OutboxStats:
        """Queued and dropped counts (for metrics and tests)."""
        with self._lock:
            return OutboxStats(queued=len(self._content.queued), dropped=self._dropped)

    # -- internals ---------------------------------------------------------------------------------------

    def _bounded(self, queued: list[QueuedReport]) -> list[QueuedReport]:
        while len(queued) > self._max:
            victim = next((i for i, entry in enumerate(queued) if entry.heartbeat), 0)
            dropped = queued.pop(victim)
            self._dropped += 1
            if not dropped.heartbeat:
                log.error("outbox_full_change_dropped", seq=dropped.report.seq, max_reports=self._max)
        return queued

    def _load(self) -> _OutboxFile:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return _OutboxFile()
        except OSError as exc:
            log.warning("outbox_unreadable", path=str(self._path), error=str(exc))
            return _OutboxFile()
        try:
            content = _OutboxFile.model_validate_json(raw)
        except ValidationError as exc:
            self._set_aside(f"not a valid outbox ({exc.error_count()} errors)")
            return _OutboxFile()
        if content.schema_version != OUTBOX_SCHEMA_VERSION:
            self._set_aside(f"schema_version {content.schema_version}, expected {OUTBOX_SCHEMA_VERSION}")
            return _OutboxFile(last_seq=content.last_seq)
        return content

    def _set_aside(self, why: str) -> None:
        target = self._path.with_name(f"{self._path.name}.corrupt")
        with suppress(OSError):
            self._path.replace(target)
        log.warning("outbox_set_aside", path=str(self._path), moved_to=str(target), reason=why)

    def _write(self) -> None:
        data = json.dumps(self._content.model_dump(mode="json", by_alias=True), separators=(",", ":"))
        directory = self._path.parent
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{self._path.name}.", dir=directory)
            try:
                with os.fdopen(handle, "wb") as sink:
                    sink.write(data.encode("utf-8"))
                    sink.flush()
                    os.fsync(sink.fileno())
                Path(temporary).replace(self._path)
            except BaseException:
                with suppress(OSError):
                    Path(temporary).unlink()
                raise
            _fsync_directory(directory)
        except OSError as exc:
            raise OutboxError(f"{self._path}: cannot write the outbox: {exc.strerror or exc}") from exc


def _fsync_directory(directory: Path) -> None:
    with suppress(OSError):  # some filesystems refuse a directory fsync; the rename is still atomic
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
