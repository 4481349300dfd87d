"""/dev/kmsg records: ``<prio>,<seq>,<usec since boot>,<flags>[,caller=T123];<message>``.

Continuation lines of a record (`` SUBSYSTEM=pci``, `` DEVICE=+pci:0000:3b:00.0``) start with a space.
The kernel escapes bytes below 0x20, from 0x7f, and the backslash itself as ``\\xNN`` in the message.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_HEADER = re.compile(r"^(?P<priority>\d+),(?P<sequence>\d+),(?P<usec>\d+),[^;]*;")
_ESCAPED = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")


class KmsgRecord(NamedTuple):
    """One /dev/kmsg record: its sequence number, microseconds since boot, and the unescaped message."""

    sequence: int
    monotonic_us: int
    message: str


def parse_kmsg_record(line: str) -> KmsgRecord | None:
    """Split a /dev/kmsg record line; None when the line has no record header."""
    header = _HEADER.match(line)
    if header is None:
        return None
    return KmsgRecord(int(header["sequence"]), int(header["usec"]), _unescape(line[header.end() :]))


def from_userspace(line: str) -> bool:
    """Whether a /dev/kmsg record was written by a user-space program, not the kernel.

    The record's first field is ``facility << 3 | level``. The kernel logs with facility 0 (LOG_KERN);
    a program writing to /dev/kmsg gets LOG_USER (1) by default and can never get LOG_KERN (the kernel's
    Documentation/ABI/testing/dev-kmsg, "Injecting messages"), so the origin is certain.
    """
    header = _HEADER.match(line)
    return header is not None and int(header["priority"]) >> 3 != 0


def _unescape(message: str) -> str:
    def decode(run: re.Match[str]) -> str:
        raw = bytes(int(code, 16) for code in run.group().split("\\x")[1:])
        return raw.decode("utf-8", errors="replace")

    return _ESCAPED.sub(decode, message)
