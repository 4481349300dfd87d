"""The driver's "fallen off the bus" report in a log that carries no ``Xid ... 79`` line.

Recent drivers (570 series and later) can report a GPU lost at probe time or after a reset with only a
multi-line message and no XID::

    NVRM: The NVIDIA GPU 0000:b3:00.0
    NVRM: (PCI ID: 10de:26b5) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

or with the single line ``NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.``. Other monitors count
these as XID 79 when no XID accompanies them, and so do we. When the same log already holds an XID 79
(for any GPU) they are follow-up lines and add nothing: XID 79 already asks for a reboot of the node.
Only whole logs are read this way; a line-by-line follower sees the XID 79 line when there is one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from agent.backends.kernel_log.text_lines import logged_by_a_program
from agent.backends.kernel_log.timestamps import absolute_time
from core.snapshot import XidEvent, pci_key

XID_FALLEN_OFF_THE_BUS = 79
MESSAGE = "GPU has fallen off the bus (driver message without an Xid line)"
_ADDRESS = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_PROBE_HEAD = re.compile(rf"NVRM: The NVIDIA GPU {_ADDRESS}\s*$")
_SINGLE_LINE = re.compile(rf"NVRM: GPU {_ADDRESS}: GPU has fallen off the bus")
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
_PROBE_SPAN = 3  # the probe message is three lines long


def fallen_off_bus_events(
    lines: Sequence[str],
    xids: Sequence[XidEvent],
    *,
    year_hint: int | None = None,
    reference: datetime | None = None,
) -> list[tuple[int, XidEvent]]:
    """(line index, XID 79 event) per GPU the log says fell off the bus, when it holds no XID 79 at all."""
    if any(event.xid == XID_FALLEN_OFF_THE_BUS for event in xids):
        return []
    found: dict[str, tuple[int, XidEvent]] = {}
    for index, line in enumerate(lines):
        match = _SINGLE_LINE.search(line) or _probe_head(lines, index)
        if match is None or logged_by_a_program(line[: match.start()]):
            continue
        key = pci_key(match["pci"])
        if key is None or key in found:
            continue
        at = absolute_time(line[: match.start()], year_hint=year_hint, reference=reference)
        event = XidEvent(
            source="kernel_log", xid=XID_FALLEN_OFF_THE_BUS, pci_bus_id=match["pci"], message=MESSAGE, at=at
        )
        found[key] = (index, event)
    return list(found.values())


def _probe_head(lines: Sequence[str], index: int) -> re.Match[str] | None:
    """The first line of the three-line probe message, when one of its lines says "fallen off the bus"."""
    match = _PROBE_HEAD.search(lines[index])
    if match is None:
        return None
    following = lines[index : index + _PROBE_SPAN]
    return match if any(_FALLEN.search(line) for line in following) else None
