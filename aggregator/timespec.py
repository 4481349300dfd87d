"""``--since`` values: a duration back from now (``90s``, ``30m``, ``1h``, ``2d``, ``1w``) or an ISO time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


class TimeSpecError(ValueError):
    """Neither a duration like ``1h`` nor an ISO 8601 time."""


def parse_since(spec: str, now: datetime) -> datetime:
    """The moment ``spec`` designates: ``now`` minus a duration, or an absolute ISO time (UTC if no zone)."""
    match = _DURATION.match(spec)
    if match:
        seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError as exc:
            raise TimeSpecError(f"duration too long: {spec!r}") from exc
    try:
        moment = datetime.fromisoformat(spec.strip())
    except ValueError as exc:
        raise TimeSpecError(f"not a duration (30m, 1h, 2d) or an ISO time: {spec!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise TimeSpecError(f"time out of range: {spec!r}") from exc


def relative(moment: datetime, now: datetime) -> str:
    """A short human phrase: ``just now``, ``3 min ago``, ``2 h ago``, ``5 d ago`` (or ``in 4 min``)."""
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 10:
        return "just now"
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86_400, "h", 3600)):
        if seconds < limit:
            amount = f"{int(seconds // size)} {unit}"
            return f"in {amount}" if future else f"{amount} ago"
    amount = f"{int(seconds // 86_400)} d"
    return f"in {amount}" if future else f"{amount} ago"
