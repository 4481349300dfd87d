"""The agent's durable outbox of reports to the aggregator, and its persisted sequence numbers.

Nothing may be lost (docs/agent.md, "The aggregator link"): a report is written here *before* it is sent
and removed only once the aggregator acknowledged it, so an outage or an agent restart leaves unsent reports
waiting on disk, delivered in order later. The aggregator ignores a report whose ``seq`` is not above the
last it accepted, so the last sequence number handed out is stored in the same file and a restarted agent
continues above it.

Bounded: heartbeats carry no news, so a queued heartbeat followed by another is replaced by the newer one;
every state change is kept. Past ``max_reports`` the oldest heartbeats go first, then (logged as an error)
the oldest changes, so a node cut off for days cannot fill its disk.

Writes are atomic (temporary file, fsync, rename, directory fsync), as for the state file, and come first:
memory changes only once the file says the same, so a full disk never leaves a report queued in memory that
is not on disk (it would be sent, and its actions reported again with the next report that is written).

A file that cannot be read as an outbox is set aside under a name of its own
(``outbox.json.corrupt-<UTC timestamp>``, as the state file is), never over an earlier one, logged once and
counted (``OutboxStats.set_aside``, exported as ``gpuhealth_agent_outbox_set_aside_total``).
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

from agent.state.store import aside_path
from core.aggregator_api import Report

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
    """How many reports wait, how many were dropped to keep the outbox bounded, and how many unreadable
    outbox files were set aside (at start)."""

    queued: int
    dropped: int
    set_aside: int = 0
    rejected: int = 0


class ReportOutbox:
    """A JSON file of queued reports plus the last sequence number; safe to use from two threads."""

    def __init__(self, path: Path | str, *, max_reports: int = DEFAULT_MAX_REPORTS) -> None:
        self._path = Path(path)
        self._max = max(2, max_reports)
        self._lock = threading.Lock()
        self._dropped = 0
        self._set_aside_count = 0
        self._rejected = 0
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
            queued, dropped = self._bounded(queued)
            content = self._content.model_copy(update={"queued": queued})
            self._write(content)  # first: when it fails, memory still matches the file
            self._content = content
            self._count_dropped(dropped)

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
            content = self._content.model_copy(update={"queued": kept})
            self._write(content)  # raises OutboxError: the reports stay queued (a repeat is ignored)
            self._content = content

    def dead_letter(self, report: Report, reason: str) -> Path:
        """The aggregator refused ``report`` for good (a 4xx no retry can change: too large, invalid): write
        it with the reason to ``<outbox>.rejected-<UTC timestamp>`` for a human, then take it out of the queue
        so the reports after it go out. Raises OutboxError when either write fails (it then stays queued)."""
        with self._lock:
            target = aside_path(self._path, "rejected")
            letter = {"reason": reason, "report": report.model_dump(mode="json")}
            try:
                target.write_text(json.dumps(letter, indent=2) + "\n", encoding="utf-8")
            except OSError as exc:
                raise OutboxError(f"cannot write {target}: {exc.strerror or exc}") from exc
            kept = [entry for entry in self._content.queued if entry.report.seq != report.seq]
            content = self._content.model_copy(update={"queued": kept})
            self._write(content)
            self._content = content
            self._rejected += 1
            return target

    def stats(self) -> OutboxStats:
        """Queued and dropped counts (for metrics and tests)."""
        with self._lock:
            return OutboxStats(
                queued=len(self._content.queued),
                dropped=self._dropped,
                set_aside=self._set_aside_count,
                rejected=self._rejected,
            )

    # -- internals ---------------------------------------------------------------------------------------

    def _bounded(self, queued: list[QueuedReport]) -> tuple[list[QueuedReport], list[QueuedReport]]:
        """The queue cut to ``max_reports`` (oldest heartbeats first, then oldest changes), and what went."""
        dropped: list[QueuedReport] = []
        while len(queued) > self._max:
            victim = next((i for i, entry in enumerate(queued) if entry.heartbeat), 0)
            dropped.append(queued.pop(victim))
        return queued, dropped

    def _count_dropped(self, dropped: list[QueuedReport]) -> None:
        """Account for reports the bound dropped, once the write that dropped them succeeded."""
        self._dropped += len(dropped)
        for entry in dropped:
            if not entry.heartbeat:
                log.error("outbox_full_change_dropped", seq=entry.report.seq, max_reports=self._max)

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
        """Move the unreadable file to a free name beside it (an earlier one is evidence too: keep it)."""
        target = aside_path(self._path)
        try:
            self._path.replace(target)
        except OSError as exc:
            # Left in place: the next write replaces it. Said once, here, with why it could not be kept.
            log.warning(
                "outbox_unreadable_not_kept", path=str(self._path), reason=why, error=exc.strerror or str(exc)
            )
            return
        self._set_aside_count += 1
        log.warning("outbox_set_aside", path=str(self._path), moved_to=str(target), reason=why)

    def _write(self, content: _OutboxFile) -> None:
        data = json.dumps(content.model_dump(mode="json", by_alias=True), separators=(",", ":"))
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
