"""/dev/kmsg records (agent/backends/kernel_log/kmsg.py)."""

from __future__ import annotations

from agent.backends.kernel_log import (
    parse_kmsg_record,
)


def test_kmsg_records_are_split_and_unescaped() -> None:
    """/dev/kmsg: sequence, microseconds since boot, message with \\xNN escapes decoded (UTF-8)."""
    record = parse_kmsg_record("4,2039,3027120442,-,caller=T12;NVRM: name=tr\\xc3\\xa4iner\\x0anext \\x5c")
    assert record == (2039, 3027120442, "NVRM: name=träiner\nnext \\")
    assert parse_kmsg_record(" SUBSYSTEM=pci") is None
