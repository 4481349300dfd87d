"""The order of cause and the grouping of node writes (aggregator/timeline.py), on hand-made events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aggregator.timeline import arrange
from core.aggregator_api import Event

T0 = datetime(2026, 12, 4, 18, 24, 43, tzinfo=UTC)
_ids = iter(range(1, 1000))


def _event(seconds: float, kind: str, message: str = "", **details: Any) -> Event:
    return Event(
        id=next(_ids),
        at=T0 + timedelta(seconds=seconds),
        node="n1",
        incident_id="inc-1",
        kind=kind,
        message=message or kind,
        details=details,
    )


def _action(seconds: float, action: str, result: str = "ok") -> Event:
    return _event(seconds, "action", f"{action} {result}", action=action, result=result)


def test_an_opening_reads_fault_opened_state_marks_permit_drain() -> None:
    """As stored: the agent's marks (its clock) first, the permit asked before the report arrived."""
    stored = [
        *(_action(0.1, action) for action in ("condition", "label", "taint", "event")),
        _event(0.3, "permit_granted", "permit for reboot granted"),
        _action(0.5, "drain"),
        _event(0.6, "findings", "findings: XID_79"),
        _event(0.6, "incident_opened"),
        _event(0.6, "state", "healthy -> unhealthy", to="unhealthy"),
    ]
    shown = [(e.kind, e.message) for e in arrange(stored, group=True)]
    assert shown == [
        ("findings", "findings: XID_79"),
        ("incident_opened", "incident_opened"),
        ("state", "healthy -> unhealthy"),
        ("node_writes", "marked: condition, label, taint, event"),
        ("permit_granted", "permit for reboot granted"),
        ("action", "drain ok"),
    ]
    assert [e.kind for e in arrange(stored)].count("action") == 5  # ungrouped: every line kept


def test_a_release_reads_recovery_state_unmarks_closed() -> None:
    stored = [
        _action(100.0, "untaint"),
        _action(100.0, "label"),
        _event(100.2, "incident_closed"),
        _event(100.2, "state", "testing -> healthy", to="healthy"),
        _event(100.2, "findings", "findings cleared"),
        _action(99.0, "validate"),
    ]
    shown = [e.message for e in arrange(stored, group=True)]
    assert shown == [
        "validate ok",
        "findings cleared",
        "released: untaint, label",
        "testing -> healthy",
        "incident_closed",
    ]


def test_transitions_far_apart_keep_their_time_order() -> None:
    later = _event(60.0, "findings", "findings: XID_13")
    first = _action(0.0, "taint")
    assert [e.id for e in arrange([later, first])] == [first.id, later.id]


def test_a_grouped_row_keeps_the_repeats_and_the_range() -> None:
    writes = [_action(0.0, "condition"), _action(0.1, "taint")]
    writes[1] = writes[1].model_copy(update={"count": 3, "last_at": T0 + timedelta(seconds=4)})
    [row] = arrange(writes, group=True)
    assert (row.kind, row.count, row.last_at) == ("node_writes", 3, T0 + timedelta(seconds=4))


def test_a_nodes_first_report_is_no_release() -> None:
    """A node that appears healthy and faults within the same seconds: its marks stay with the fault."""
    stored = [
        _event(0.0, "state", "new -> healthy", **{"from": "new", "to": "healthy"}),
        _event(1.0, "findings", "findings: XID_79"),
        _event(1.0, "incident_opened"),
        _action(0.9, "taint"),
        _action(0.9, "label"),
        _event(1.2, "permit_granted", "permit granted"),
    ]
    shown = [e.message for e in arrange(stored, group=True)]
    assert shown == [
        "new -> healthy",
        "findings: XID_79",
        "incident_opened",
        "marked: taint, label",
        "permit granted",
    ]
