"""How many lines of a file given as a kernel log are kernel-log lines at all.

A post-mortem (``gpuhealth check --kernel-log FILE``) of a file with no XID is an all-clear only when the
file is a kernel log: an empty file, a README or random bytes given by mistake must not read as "no
faults". A line counts when it has the form one of the accepted tools writes (docs/kernel-log.md): a dmesg
stamp (raw, ``-T``, ``--time-format=iso``, ``-x``), a syslog or journalctl header (classic, ISO, epoch,
RFC 5424), a /dev/kmsg record, a journald JSON entry, or a bare driver line (``NVRM:``, ``kernel:``), or
when the kernel-log readers find an XID, SXid or link change on it.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from agent.backends.kernel_log import (
    KernelLogError,
    parse_kmsg_record,
    parse_link_line,
    parse_sxid_line,
    parse_xid_line,
)

_MONTH_DAY_CLOCK = r"[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?"
_ISO = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
_TAG = r"[^\s:\[]+(?:\[\d+\])?:"
_FORMS = re.compile(
    "|".join(
        (
            r"^\s*\[\s*\d+\.\d+\]",  # dmesg
            r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4}\]",  # dmesg -T
            rf"^{_ISO}\s",  # dmesg --time-format=iso
            r"^[a-z0-9]+\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:",  # dmesg -x
            rf"^{_MONTH_DAY_CLOCK}\s+\S+\s+{_TAG}",  # syslog, journalctl
            rf"^{_ISO}\s+\S+\s+{_TAG}",  # rsyslog ISO, journalctl -o short-iso
            rf"^\d{{9,11}}(?:\.\d+)?\s+\S+\s+{_TAG}",  # journalctl -o short-unix
            r"^<\d{1,3}>",  # RFC 5424 / 3164 with a priority
            r"^\s*(?:kernel:\s*)?NVRM:",  # a bare driver line
            r"^-- (?:Logs begin|Journal begins|No entries|Boot )",  # journalctl's own notes
        )
    )
)

_JOURNAL_FIELD = re.compile(r'"MESSAGE"\s*:')


def recognised_lines(path: str | Path) -> int:
    """How many lines of the file at ``path`` (plain or gzip) have a kernel log's form; raises
    :class:`KernelLogError` naming the file when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KernelLogError(f"{path}: cannot read kernel log: {exc.strerror or exc}") from exc
    if data.startswith(b"\x1f\x8b"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise KernelLogError(f"{path}: cannot read kernel log: corrupt gzip data ({exc})") from exc
    text = data.decode("utf-8", errors="replace")
    return sum(1 for line in text.splitlines() if is_kernel_log_line(line))


def is_kernel_log_line(line: str) -> bool:
    """Whether ``line`` has the form of a kernel-log line (see the module's docstring)."""
    if not line.strip():
        return False
    if _FORMS.search(line) is not None or parse_kmsg_record(line) is not None:
        return True
    if _JOURNAL_FIELD.search(line) is not None:
        return True  # a journald JSON entry (one per line, or its MESSAGE line in json-pretty)
    return any(parse(line) is not None for parse in (parse_xid_line, parse_sxid_line, parse_link_line))
