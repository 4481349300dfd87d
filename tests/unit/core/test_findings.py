"""An unknown finding carries its age: stamped once, kept while it stays unknown, shown as people read it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.findings import Action, Finding, Status, age_text, with_unknown_ages

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def finding(code: str, status: Status = Status.UNKNOWN) -> Finding:
    return Finding(
        check="presence",
        gpu=None,
        status=status,
        code=code,
        message="NVML call timed out",
        action=Action.NONE,
    )


def test_unknown_findings_keep_their_first_stamp_and_others_have_none() -> None:
    stamped, held = with_unknown_ages([finding("NVML_UNAVAILABLE"), finding("XID_79", Status.FAIL)], {}, T0)
    assert [f.since for f in stamped] == [T0, None]
    later = T0 + timedelta(minutes=14)
    again, held = with_unknown_ages([finding("NVML_UNAVAILABLE")], held, later)
    assert again[0].since == T0
    assert again[0].shown(later) == "unknown for 14 min: NVML call timed out"
    _, held = with_unknown_ages([], held, later)
    assert held == {}
    anew, _ = with_unknown_ages([finding("NVML_UNAVAILABLE")], held, later)
    assert anew[0].since == later  # unknown again after a clean pass: a new age


def test_ages_read_as_people_read_them() -> None:
    assert [age_text(s) for s in (40, 14 * 60, 3 * 3600, 3 * 86400)] == ["40 s", "14 min", "3 h", "3 d"]
    assert finding("XID_79", Status.FAIL).shown(T0) == "NVML call timed out"  # only unknown shows an age
