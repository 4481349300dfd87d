"""One kernel-log text line -> an XidEvent, whatever tool printed it.

The NVIDIA driver prints (open-gpu-kernel-modules, ``krcReportXid``)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, <message>
    NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:00): 94, pid=..., name=..., <message>   (MIG attribution)
    NVRM: Xid (PCI:0000:3b:00): 154, <message>                                           (no process part)
    NVRM: Xid (0000:03:00): 13, <message>                                                (drivers before ~390)

``pid`` is ``'<unknown>'`` and ``name`` is ``<unknown>`` when no channel owns the error. Every tool adds
its own prefix (a dmesg stamp, a syslog date and host, a kmsg record header); we look for the Xid
anywhere on the line and read an absolute time, when there is one, from what comes before it.
"""

from __future__ import annotations

import re
from datetime import datetime

from agent.backends.kernel_log.timestamps import absolute_time
from core.snapshot import XidEvent, pci_key

# "Xid (" not preceded by a letter: NVSwitch "SXid (" lines are switch errors, not GPU XIDs.
_XID = re.compile(r"(?<![A-Za-z])Xid\s*\((?P<device>[^()]*)\)\s*:?\s*(?P<xid>\d{1,9})(?=,|\s|$)")
_PCI_WITH_DOMAIN = re.compile(
    r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?(?![0-9A-Fa-f:])"
)
_PCI_WITHOUT_DOMAIN = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7](?![0-9A-Fa-f:])")
# A syslog header names the program that logged the line: "<date> <host> <tag>[pid]: " (classic and
# journalctl) or "<pri>1 <date> <host> <app> ..." (RFC 5424). When that program is not the kernel, the
# line is a program quoting a kernel message (a health script, another monitor), not the kernel reporting.
_SYSLOG_TAG = re.compile(
    r"^\s*(?:<\d{1,3}>)?(?:\d{4}-\d{2}-\d{2}T\S+|[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?|\d{9,11}(?:\.\d+)?)"
    r"\s+\S+(?<!:)\s+(?P<tag>[^\s:\[]+)(?:\[\d+\])?:\s"
)
_RFC5424_APP = re.compile(r"^\s*<\d{1,3}>\d{1,2}\s+\S+\s+\S+\s+(?P<tag>\S+)\s")
_KERNEL_TAGS = frozenset({"kernel", "kern", "nvrm", "-"})
_PCI_LABEL = re.compile(r"PCI:", re.IGNORECASE)
_PID = re.compile(r"\s*pid=(?P<pid>'[^']*'|<[^>]*>|[^,\s]*)")
_NAME = re.compile(r"\s*,\s*name=(?P<name>[^,]*)")
_ONE_SEPARATOR = re.compile(r"^\s*,")


def parse_text_line(
    line: str, *, year_hint: int | None = None, reference: datetime | None = None
) -> XidEvent | None:
    """The XID a kernel-log text line reports, or None for any other line (never raises)."""
    match = _XID.search(line)
    if match is None or logged_by_a_program(line[: match.start()]):
        return None
    pid, process_name, message = _process_and_message(line[match.end() :])
    return XidEvent(
        source="kernel_log",
        xid=int(match["xid"]),
        pci_bus_id=_pci_address(match["device"]),
        pid=pid,
        process_name=process_name,
        message=message,
        at=absolute_time(line[: match.start()], year_hint=year_hint, reference=reference),
    )


def logged_by_a_program(prefix: str) -> bool:
    """Whether a syslog header before the XID names a program other than the kernel."""
    header = _SYSLOG_TAG.match(prefix) or _RFC5424_APP.match(prefix)
    return header is not None and header["tag"].lower() not in _KERNEL_TAGS


def _pci_address(device: str) -> str | None:
    """The PCI address inside the parentheses, as printed but without the ``PCI:`` label."""
    unlabelled = _PCI_LABEL.sub(" ", device)
    for pattern in (_PCI_WITH_DOMAIN, _PCI_WITHOUT_DOMAIN):
        found = pattern.search(unlabelled)
        if found is not None and pci_key(found.group()) is not None:
            return found.group()
    return None


def _process_and_message(rest: str) -> tuple[int | None, str | None, str | None]:
    """Split ``, pid=..., name=..., message`` (each part optional) after the XID number."""
    rest = _ONE_SEPARATOR.sub("", rest, count=1)
    pid_match = _PID.match(rest)
    if pid_match is None:
        return None, None, _text_or_none(rest)
    pid = _int_or_none(pid_match["pid"])
    rest = rest[pid_match.end() :]
    process_name = None
    name_match = _NAME.match(rest)
    if name_match is not None:
        process_name = _name_or_none(name_match["name"])
        rest = rest[name_match.end() :]
    return pid, process_name, _text_or_none(_ONE_SEPARATOR.sub("", rest, count=1))


def _int_or_none(text: str) -> int | None:
    """``pid=1234`` -> 1234; ``'<unknown>'``, ``<unknown>``, ``N/A`` and the like -> None."""
    return int(text) if text.isdigit() and text.isascii() else None


def _name_or_none(text: str) -> str | None:
    name = text.strip().strip("'")
    if not name or (name.startswith("<") and name.endswith(">")):
        return None
    return name


def _text_or_none(text: str) -> str | None:
    stripped = text.strip()
    return stripped or None
