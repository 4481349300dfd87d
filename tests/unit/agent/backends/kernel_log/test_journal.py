"""journald JSON (agent/backends/kernel_log/journal.py): a log of JSON documents is read as journal entries."""

from __future__ import annotations

import json
from typing import NamedTuple

from repo_paths import FIXTURES

from agent.backends.kernel_log import (
    parse_kernel_log,
)
from core.snapshot import XidEvent

LOGS = FIXTURES / "kernel_logs"


class Expected(NamedTuple):
    xid: int
    pci_bus_id: str | None
    pid: int | None
    process_name: str | None
    message: str | None
    at: str | None


def _as_expected(event: XidEvent) -> Expected:
    at = None if event.at is None else event.at.isoformat()
    return Expected(event.xid, event.pci_bus_id, event.pid, event.process_name, event.message, at)


def test_a_log_that_is_all_json_documents_is_read_as_journal_entries() -> None:
    """journalctl -o json-pretty (multi-line objects) and a JSON array of entries are both accepted."""
    entries = [json.loads(line) for line in (LOGS / "journal-h100-xid.jsonl").read_text().splitlines()]
    pretty = "\n".join(json.dumps(entry, indent=4) for entry in entries)
    expected = [
        _as_expected(event) for event in parse_kernel_log((LOGS / "journal-h100-xid.jsonl").read_text())
    ]
    assert [_as_expected(event) for event in parse_kernel_log(pretty)] == expected
    assert [_as_expected(event) for event in parse_kernel_log(json.dumps(entries))] == expected
    assert [event.xid for event in expected] == [79, 13, 154]
