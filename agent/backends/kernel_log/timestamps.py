"""Absolute times in the prefix that dmesg, journalctl and syslog write before a kernel message.

Only absolute times are read. The monotonic ``[  123.456789]`` stamp of raw dmesg and /dev/kmsg counts
from boot and says nothing about the wall clock, so a line that carries nothing else has no time.
Times printed without a zone (``dmesg -T``, classic syslog, ``journalctl`` short forms) are local time
of the node that wrote them; we cannot know that zone, and GPU nodes overwhelmingly run in UTC, so they
are read as UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from core.clock import utc_now

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}

# journalctl short-iso(-precise), short-full, dmesg --time-format=iso, RFC 5424, rsyslog's file format.
_ISO = re.compile(
    r"(?<!\d)(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})[T ]"
    r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?"
    r"(?:\s?(?P<zone>Z|[+-]\d{2}:?\d{2}|UTC|GMT))?"
)
# Classic syslog and journalctl short(-precise) ("Aug  9 13:32:56"), dmesg -T ("Fri Aug 30 11:43:09 2024").
_MONTH_NAME = re.compile(
    r"(?<![A-Za-z])(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(?P<day>\d{1,2})\s+"
    r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?"
    r"(?:\s+(?P<year>(?:19|20|21)\d{2})(?=\]|\s|$))?",
    re.IGNORECASE,
)
# journalctl -o short-unix: seconds since the epoch first on the line.
_EPOCH = re.compile(r"^\s*(?P<seconds>\d{9,11})(?:\.(?P<fraction>\d{1,9}))?(?=\s)")

# A yearless time more than this far ahead of the reference belongs to the previous year (a log from
# December read in January); the slack absorbs clock skew between the node and the reader.
_FUTURE_SLACK = timedelta(days=2)


def absolute_time(
    prefix: str, *, year_hint: int | None = None, reference: datetime | None = None
) -> datetime | None:
    """The UTC time a log line's prefix states, or None when it states no absolute time.

    ``year_hint`` is the year for formats that print none (classic syslog, ``journalctl`` short); without
    it the year is the one that puts the time at or before ``reference`` (default: now).
    """
    iso = _ISO.search(prefix)
    if iso is not None:
        return _from_iso(iso)
    named = _MONTH_NAME.search(prefix)
    if named is not None:
        return _from_month_name(named, year_hint, reference)
    epoch = _EPOCH.match(prefix)
    if epoch is not None:
        return _from_epoch(epoch)
    return None


def _microseconds(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _zone(text: str | None) -> timezone:
    if text is None or text in ("Z", "UTC", "GMT"):
        return UTC
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return timezone(-offset if text[0] == "-" else offset)


def _from_iso(match: re.Match[str]) -> datetime | None:
    try:
        local = datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            _microseconds(match["fraction"]),
            tzinfo=_zone(match["zone"]),
        )
    except ValueError:
        return None
    return local.astimezone(UTC)


def _from_month_name(
    match: re.Match[str], year_hint: int | None, reference: datetime | None
) -> datetime | None:
    month = _MONTHS[match["month"].lower()]
    clock = (int(match["hour"]), int(match["minute"]), int(match["second"]), _microseconds(match["fraction"]))
    if match["year"] is not None:
        return _build(int(match["year"]), month, int(match["day"]), clock)
    if year_hint is not None:
        return _build(year_hint, month, int(match["day"]), clock)
    now = reference or utc_now()
    for year in (now.year, now.year - 1):
        candidate = _build(year, month, int(match["day"]), clock)
        if candidate is not None and candidate <= now + _FUTURE_SLACK:
            return candidate
    return None


def _build(year: int, month: int, day: int, clock: tuple[int, int, int, int]) -> datetime | None:
    try:
        return datetime(year, month, day, *clock, tzinfo=UTC)
    except ValueError:
        return None


def _from_epoch(match: re.Match[str]) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(match["seconds"]), UTC) + timedelta(
            microseconds=_microseconds(match["fraction"])
        )
    except (OverflowError, OSError, ValueError):
        return None
