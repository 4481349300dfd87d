"""Kernel-log XID reader: dmesg, journald and syslog text, /dev/kmsg records, journald JSON.

Import everything from here (``agent.backends.kernel_log``); the submodules are implementation detail.
See docs/kernel-log.md for the accepted forms and what is extracted.
"""

from __future__ import annotations

from agent.backends.kernel_log.attach import SAME_EVENT_WINDOW, attach_kernel_xids, order_by_time
from agent.backends.kernel_log.errors import KernelLogError
from agent.backends.kernel_log.followers import (
    DEFAULT_JOURNAL_COMMAND,
    DEFAULT_KMSG_PATH,
    JournalFollower,
    KmsgFollower,
    RecordSource,
    XidCallback,
)
from agent.backends.kernel_log.journal import parse_journal_entry, parse_journal_json_line
from agent.backends.kernel_log.kmsg import KmsgRecord, parse_kmsg_record
from agent.backends.kernel_log.link_state import parse_link_line
from agent.backends.kernel_log.parse import (
    parse_kernel_log,
    parse_xid_line,
    read_fabric_lines,
    read_kernel_log,
)
from agent.backends.kernel_log.sxid import parse_sxid_line
from core.snapshot import SxidEvent

__all__ = [
    "DEFAULT_JOURNAL_COMMAND",
    "DEFAULT_KMSG_PATH",
    "SAME_EVENT_WINDOW",
    "JournalFollower",
    "KernelLogError",
    "KmsgFollower",
    "KmsgRecord",
    "RecordSource",
    "SxidEvent",
    "XidCallback",
    "attach_kernel_xids",
    "order_by_time",
    "parse_journal_entry",
    "parse_journal_json_line",
    "parse_kernel_log",
    "parse_kmsg_record",
    "parse_link_line",
    "parse_sxid_line",
    "parse_xid_line",
    "read_fabric_lines",
    "read_kernel_log",
]
