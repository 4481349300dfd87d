"""Snapshot files: read and validate saved v1 snapshots (``gpuhealth check --snapshot``, tests, sim)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from core.snapshot import SNAPSHOT_SCHEMA, NodeSnapshot


class SnapshotError(Exception):
    """A snapshot file that cannot be read or is not a valid v1 snapshot. The message is one line."""


def load_snapshot(path: str | Path) -> NodeSnapshot:
    """Read a v1 snapshot file, or raise :class:`SnapshotError` naming the file and the first problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SnapshotError(f"{path}: cannot read snapshot: {reason}") from exc
    return parse_snapshot(text, source=str(path))


def parse_snapshot(text: str, *, source: str = "snapshot") -> NodeSnapshot:
    """Validate snapshot JSON text; errors name ``source`` and the offending field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            f"{source}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    if isinstance(data, dict) and "schema" not in data:
        raise SnapshotError(f"{source}: invalid snapshot: schema: missing (expected '{SNAPSHOT_SCHEMA}')")
    try:
        # Validate from the JSON text, not from ``data``: strict mode accepts ISO strings for datetimes only
        # when validating JSON.
        return NodeSnapshot.model_validate_json(text)
    except ValidationError as exc:
        raise SnapshotError(f"{source}: invalid snapshot: {describe_validation_error(exc)}") from exc


def describe_validation_error(exc: ValidationError) -> str:
    """The first validation problem as ``field.path: message`` (plus how many more there are)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "literal_error" and first["loc"] == ("schema",):
        message = f"unsupported schema {first.get('input')!r}, expected 'gpuhealth.snapshot/v1'"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location}: {message}{more}"
