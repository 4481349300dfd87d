"""journald's JSON export (``journalctl -o json``): one entry per line.

Values are strings, except that a field holding bytes that are not valid UTF-8 is an array of byte values,
a field with several values is an array of those values, and a field over 4096 bytes is ``null`` unless
``--all`` was given. ``__REALTIME_TIMESTAMP`` is microseconds since the epoch (when journald stored the
entry); ``_SOURCE_MONOTONIC_TIMESTAMP`` of a kernel entry counts from boot and is not a wall-clock time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from agent.backends.kernel_log.text_lines import parse_text_line
from core.snapshot import XidEvent

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A user-space program quoting an NVRM line (a health script, our own agent's logs) is not the kernel
# reporting an XID; entries that say where they came from must say "kernel".
_KERNEL = "kernel"


def parse_journal_entry(entry: Mapping[str, object]) -> XidEvent | None:
    """The XID a journald entry (a decoded ``journalctl -o json`` object) reports, or None."""
    if not is_kernel_entry(entry):
        return None
    message = _message_text(entry.get("MESSAGE"))
    if message is None:
        return None
    event = parse_text_line(message)
    if event is None:
        return None
    stored_at = _entry_time(entry)
    return event if stored_at is None else event.model_copy(update={"at": stored_at})


def kernel_message(line: str) -> str | None:
    """The MESSAGE of a ``journalctl -o json`` line when the entry is the kernel's own; None otherwise."""
    entry = decode_json_object(line)
    if entry is None or not is_kernel_entry(entry):
        return None
    return _message_text(entry.get("MESSAGE"))


def parse_journal_json_line(line: str) -> XidEvent | None:
    """The XID one line of ``journalctl -o json`` (or ``json-seq``) output reports, or None (never raises)."""
    entry = decode_json_object(line)
    return None if entry is None else parse_journal_entry(entry)


def decode_json_object(line: str) -> dict[str, object] | None:
    """The JSON object on this line, or None when the line is not one."""
    text = line.strip().lstrip("\x1e")
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def is_kernel_entry(entry: Mapping[str, object]) -> bool:
    """Whether a journald entry is the kernel's own (``_TRANSPORT=kernel``), not a program's (``syslog``,
    ``journal``, ``stdout``: ``logger``, a service quoting a kernel line); an entry that says neither is
    taken as the kernel's (a saved export trimmed to MESSAGE)."""
    transport = entry.get("_TRANSPORT")
    identifier = entry.get("SYSLOG_IDENTIFIER")
    if transport is None and identifier is None:
        return True
    return _KERNEL in (transport, identifier)


def _message_text(value: object) -> str | None:
    """MESSAGE as text: a string, bytes as an array of numbers, or the first of several values."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        if all(isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 255 for item in value):
            return bytes(value).decode("utf-8", errors="replace")
        return _message_text(value[0])
    return None


def _entry_time(entry: Mapping[str, object]) -> datetime | None:
    for key in ("_SOURCE_REALTIME_TIMESTAMP", "__REALTIME_TIMESTAMP"):
        value = entry.get(key)
        if isinstance(value, str) and value.isdigit() and value.isascii():
            try:
                return _EPOCH + timedelta(microseconds=int(value))
            except OverflowError:
                return None
    return None
