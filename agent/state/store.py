"""The agent's state file on the node: loaded once at start, saved atomically after each tick.

A crash at any point leaves either the old file or the new one, never a torn one: the new content goes to a
temporary file in the same directory, is fsynced, renamed over the old name, and the directory is fsynced so
the rename itself survives a power cut. A save whose content equals what is on disk writes nothing, so a
healthy, unchanging node does not write its disk every tick. A file that cannot be read back (corrupt, or
another schema version) is set aside as ``<name>.corrupt-<UTC timestamp>`` for a human, and the agent
starts fresh rather than refusing to run.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import suppress
from pathlib import Path

import structlog
from pydantic import ValidationError

from agent.state.machine import STATE_SCHEMA_VERSION, AgentState
from core.clock import utc_now

log = structlog.get_logger(__name__)


class StateStoreError(Exception):
    """The state file could not be written (disk full, directory missing or read-only)."""


class StateStore:
    """One JSON file holding the ``AgentState`` of this node's agent."""

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path)
        self._on_disk: bytes | None = None

    @property
    def path(self) -> Path:
        """Where the state lives."""
        return self._path

    def load(self) -> AgentState | None:
        """The saved state; None when there is none or it was unusable (then set aside with a warning)."""
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("state_unreadable", path=str(self._path), error=str(exc))
            return None
        version = _schema_version(raw)
        if version is not None and version != STATE_SCHEMA_VERSION:
            self._set_aside(f"schema_version {version}, expected {STATE_SCHEMA_VERSION}")
            return None
        try:
            state = AgentState.model_validate_json(raw)
        except ValidationError as exc:
            self._set_aside(f"not a valid state file ({exc.error_count()} errors)")
            return None
        self._on_disk = raw
        return state

    def save(self, state: AgentState) -> bool:
        """Write ``state`` atomically; False (and no write) when the file already holds this content."""
        content = state.model_dump_json(indent=1).encode()
        if content == self._on_disk:
            return False
        try:
            self._write_atomically(content)
        except OSError as exc:
            raise StateStoreError(f"cannot write state file {self._path}: {exc.strerror or exc}") from exc
        self._on_disk = content
        return True

    def _write_atomically(self, content: bytes) -> None:
        directory = self._path.parent
        fd, temp_name = tempfile.mkstemp(prefix=f".{self._path.name}.", suffix=".tmp", dir=directory)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            temp.replace(self._path)
        except BaseException:
            with suppress(OSError):
                temp.unlink()
            raise
        _fsync_directory(directory)

    def _set_aside(self, problem: str) -> None:
        target = aside_path(self._path)
        try:
            self._path.rename(target)
        except OSError as exc:
            log.warning("state_discarded", path=str(self._path), problem=problem, error=str(exc))
            return
        log.warning("state_set_aside", path=str(self._path), problem=problem, moved_to=str(target))


def aside_path(path: Path, why: str = "corrupt") -> Path:
    """Where to set something of ``path`` aside for a human: ``<name>.<why>-<UTC timestamp>``, with ``-2``,
    ``-3`` ... when that name is taken, so a later one never replaces an earlier one (an unreadable state file
    or report outbox, a report the aggregator refused for good)."""
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.{why}-{stamp}-{counter}")
    return target


def _schema_version(raw: bytes) -> object:
    """The file's ``schema_version`` when it is a JSON object that has one (checked before the fields)."""
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return document.get("schema_version") if isinstance(document, dict) else None


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; some filesystems refuse to open a directory, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
