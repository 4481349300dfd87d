"""Whole kernel logs: dmesg, journalctl (text or JSON), syslog files and /dev/kmsg dumps -> XidEvents."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from agent.backends.kernel_log.errors import KernelLogError
from agent.backends.kernel_log.fallen_off import fallen_off_bus_events
from agent.backends.kernel_log.journal import decode_json_object, is_kernel_entry, parse_journal_entry
from agent.backends.kernel_log.kmsg import from_userspace, parse_kmsg_record
from agent.backends.kernel_log.link_state import parse_link_line
from agent.backends.kernel_log.sxid import parse_sxid_line
from agent.backends.kernel_log.text_lines import parse_text_line
from core.snapshot import LinkEvent, SxidEvent, XidEvent

_GZIP_MAGIC = b"\x1f\x8b"


def parse_xid_line(
    line: str, *, year_hint: int | None = None, reference: datetime | None = None
) -> XidEvent | None:
    """The XID one log line reports, or None for any other line; never raises.

    Accepts dmesg (raw, ``-T``, ``--time-format=iso``, ``-x``), journalctl text forms, classic and
    RFC 5424 syslog, a /dev/kmsg record, a journald JSON entry, or a bare ``NVRM: Xid ...`` line.
    ``year_hint`` supplies the year for formats that print none (see :mod:`.timestamps`).
    """
    entry = decode_json_object(line)
    if entry is not None:
        return parse_journal_entry(entry)
    record = parse_kmsg_record(line)
    if record is not None:
        return None if from_userspace(line) else parse_text_line(record.message)
    return parse_text_line(line, year_hint=year_hint, reference=reference)


def parse_kernel_log(
    text: str | Iterable[str], *, year_hint: int | None = None, reference: datetime | None = None
) -> list[XidEvent]:
    """Every XID in a kernel log, in log order; journald JSON lines are recognised line by line.

    ``text`` is the whole log or an iterable of lines. A log that is entirely JSON (``journalctl -o json``,
    ``json-pretty`` or a JSON array of entries) is read as JSON documents. In a text log with no XID 79,
    the driver's "fallen off the bus" message counts as XID 79 for the GPU it names (see :mod:`.fallen_off`).
    """
    if isinstance(text, str):
        entries = _json_entries(text)
        if entries is not None:
            return [event for entry in entries if (event := parse_journal_entry(entry)) is not None]
        lines: Iterable[str] = text.splitlines()
    else:
        lines = (piece for item in text for piece in item.splitlines())
    kept = list(lines)
    indexed = [
        (index, event)
        for index, line in enumerate(kept)
        if (event := parse_xid_line(line, year_hint=year_hint, reference=reference)) is not None
    ]
    lost = fallen_off_bus_events(
        kept, [event for _, event in indexed], year_hint=year_hint, reference=reference
    )
    return [event for _, event in sorted([*indexed, *lost], key=lambda pair: pair[0])]


def read_kernel_log(path: str | Path, *, year_hint: int | None = None) -> list[XidEvent]:
    """Every XID in a saved kernel log file (plain or gzip-compressed), in log order.

    Raises :class:`KernelLogError` naming the file when it cannot be read. Without ``year_hint``, a
    yearless syslog date takes the year that puts it at or before the file's last modification.
    """
    try:
        data = Path(path).read_bytes()
        modified = datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)
    except OSError as exc:
        raise KernelLogError(f"{path}: cannot read kernel log: {exc.strerror or exc}") from exc
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise KernelLogError(f"{path}: cannot read kernel log: corrupt gzip data ({exc})") from exc
    text = data.decode("utf-8", errors="replace")
    return parse_kernel_log(text, year_hint=year_hint, reference=modified)


def read_fabric_lines(
    path: str | Path, *, year_hint: int | None = None
) -> tuple[list[SxidEvent], list[LinkEvent]]:
    """The NVSwitch SXids and NIC link changes in a saved kernel log (plain, gzip or journald JSON).

    Raises :class:`KernelLogError` naming the file when it cannot be read. Journald entries are read by
    their ``MESSAGE``, the kernel's own only; every other form line by line, where a line another program
    logged (a syslog header naming it, a /dev/kmsg record written from user space) is a quote, not a report.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KernelLogError(f"{path}: cannot read kernel log: {exc.strerror or exc}") from exc
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise KernelLogError(f"{path}: cannot read kernel log: corrupt gzip data ({exc})") from exc
    text = data.decode("utf-8", errors="replace")
    entries = _json_entries(text)
    lines = (
        [
            message
            for entry in entries
            if is_kernel_entry(entry) and isinstance(message := entry.get("MESSAGE"), str)
        ]
        if entries is not None
        else [_kernel_text(line) for line in text.splitlines()]
    )
    sxids = [sxid for line in lines if (sxid := parse_sxid_line(line, year_hint=year_hint)) is not None]
    links = [link for line in lines if (link := parse_link_line(line, year_hint=year_hint)) is not None]
    return sxids, links


def _kernel_text(line: str) -> str:
    """A line as the fabric parsers read it: a /dev/kmsg record's message (empty when user space wrote it)."""
    if parse_kmsg_record(line) is None:
        return line
    return "" if from_userspace(line) else line


def _json_entries(text: str) -> list[dict[str, object]] | None:
    """The journald entries of a log made only of JSON documents, or None if it is anything else."""
    if not text.lstrip().startswith(("{", "[", "\x1e")):
        return None
    try:
        return list(_iter_json_objects(text))
    except (ValueError, RecursionError):
        return None


def _iter_json_objects(text: str) -> Iterator[dict[str, object]]:
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and (text[position].isspace() or text[position] == "\x1e"):
            position += 1
        if position == len(text):
            return
        value, position = decoder.raw_decode(text, position)
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                raise ValueError("not a journald entry")
            yield item
