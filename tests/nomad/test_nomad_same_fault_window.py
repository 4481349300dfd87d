"""The same-fault window's marker on Nomad: a job's replacement chain says whether it was just restarted as
a whole (``remediation.nomad.requeue.restarted_within``). Allocations are shaped like Nomad's
``AllocListStub`` (``NextAllocation`` on the replaced one, ``CreateTime`` in nanoseconds)."""

from __future__ import annotations

from typing import Any

from remediation.nomad.requeue import restarted_within

S = 1_000_000_000
NOW = 1_800_000_000 * S
WINDOW_S = 600.0


def stopped(alloc_id: str, next_id: str, *, migrate: bool = True) -> dict[str, Any]:
    return {
        "ID": alloc_id,
        "DesiredStatus": "stop",
        "ClientStatus": "complete",
        "DesiredTransition": {"Migrate": migrate or None},
        "NextAllocation": next_id,
        "CreateTime": NOW - 3600 * S,
    }


def running(alloc_id: str, age_s: float) -> dict[str, Any]:
    return {
        "ID": alloc_id,
        "DesiredStatus": "run",
        "ClientStatus": "running",
        "DesiredTransition": {"Migrate": None},
        "NextAllocation": "",
        "CreateTime": NOW - int(age_s * S),
    }


def test_every_rank_replacing_a_stopped_one_within_the_window_is_a_recent_restart() -> None:
    job = [stopped("a0", "b0"), stopped("a1", "b1"), running("b0", 2), running("b1", 1)]
    assert restarted_within(job, NOW, WINDOW_S) == 2.0


def test_a_rank_that_was_not_replaced_means_the_job_did_not_restart_as_a_whole() -> None:
    """One rank rescheduled alone (the other one still the original) is not a restart of the job."""
    job = [stopped("a0", "b0"), running("b0", 2), running("a1", 3600)]
    assert restarted_within(job, NOW, WINDOW_S) is None


def test_a_restart_older_than_the_window_counts_no_more() -> None:
    job = [stopped("a0", "b0"), stopped("a1", "b1"), running("b0", 700), running("b1", 700)]
    assert restarted_within(job, NOW, WINDOW_S) is None


def test_replacements_of_failed_or_updated_allocations_are_not_a_restart_by_stop() -> None:
    """A failure's reschedule keeps the old allocation desired ``run``; a job update stops without
    migration: neither is what a requeue (or a drain) leaves behind."""
    failed = {**running("a0", 3600), "ClientStatus": "failed", "NextAllocation": "b0"}
    assert restarted_within([failed, running("b0", 5)], NOW, WINDOW_S) is None
    updated = [stopped("a0", "b0", migrate=False), running("b0", 5)]
    assert restarted_within(updated, NOW, WINDOW_S) is None


def test_a_zero_window_or_a_job_with_nothing_live_never_counts() -> None:
    job = [stopped("a0", "b0"), running("b0", 1)]
    assert restarted_within(job, NOW, 0.0) is None
    assert restarted_within([stopped("a0", "b0")], NOW, WINDOW_S) is None
