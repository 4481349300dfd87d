"""The Nomad executor when Nomad says no: a token without node:write, an outage, a node that is gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from core.clock import ManualClock
from core.steps import SetStateLabel, SetTaint
from remediation.nomad.executor import NomadExecutor
from sim.nomad.harness import NomadSim, running_nomad_sim

AGENT_RULES = """
agent { policy = "read" }
node { policy = "write" }
namespace "*" { capabilities = ["read-job", "alloc-lifecycle"] }
"""
READ_ONLY_RULES = """
agent { policy = "read" }
node { policy = "read" }
namespace "*" { capabilities = ["read-job"] }
"""
HOLD_S = 300.0


@pytest.fixture
def sim(clock: ManualClock) -> Any:
    """Two GPU nodes with ACLs on."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=False, acl=True) as nomad:
        yield nomad


def test_a_token_without_node_write_fails_the_steps_with_one_clear_error_and_holds_writes(
    sim: NomadSim, clock: ManualClock, executor_for: Callable[..., NomadExecutor], view: Any
) -> None:
    """403: each step fails with a line naming node:write, the error is logged once, and no request is
    sent again until the hold has passed: no retry storm, however many passes ask."""
    executor = executor_for(
        token=sim.create_token("reader", READ_ONLY_RULES), settings={"forbidden_hold_s": HOLD_S}
    )

    with capture_logs() as logs:
        first = executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")])
        writes = executor.writes_total
        later = [executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")]) for _ in range(20)]

    assert not any(result.ok for result in first.results)
    assert "node:write" in first.results[0].detail and first.results[0].attempts == 1
    assert executor.problem is not None and "node:write" in executor.problem
    assert all(
        r.detail.startswith("skipped:") and r.attempts == 0 for report in later for r in report.results
    )
    assert executor.writes_total == writes  # nothing sent while the hold lasts
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["nomad_forbidden"]
    assert view.eligibility() == "eligible"

    clock.advance(HOLD_S)
    executor.apply([SetStateLabel("unhealthy")])
    assert executor.writes_total == writes + 1  # one try after the hold, refused again
    assert len([e for e in logs if e["log_level"] == "error"]) == 1


def test_the_token_never_appears_in_logs_or_results(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor]
) -> None:
    """Refusals and outages are described without the secret."""
    token = sim.create_token("reader", READ_ONLY_RULES)
    with capture_logs() as logs:
        executor = executor_for(token=token)
        report = executor.apply([SetTaint("reboot")])
        sim.outage(60)
        executor.apply([SetStateLabel("unhealthy")])

    text = repr(logs) + repr(report)
    assert token not in text


def test_a_token_with_node_write_is_enough(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor], view: Any
) -> None:
    """The documented agent policy (agent read, node write, read-job + alloc-lifecycle) applies every step."""
    executor = executor_for(token=sim.create_token("agent", AGENT_RULES))

    report = executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")])

    assert all(result.ok for result in report.results), report.results
    assert executor.problem is None
    assert view.eligibility() == "ineligible"


def test_an_outage_fails_the_pass_after_retries_and_the_next_pass_applies(
    sim: NomadSim, clock: ManualClock, executor_for: Callable[..., NomadExecutor], view: Any
) -> None:
    """503 for a minute: the first step is retried with backoff until its deadline, the rest of the pass is
    skipped at once, nothing is marked as a problem; once Nomad is back the same steps go through."""
    executor = executor_for(token=sim.management_token)
    sim.outage(60)

    during = executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")])

    assert [r.ok for r in during.results] == [False, False]
    assert during.results[0].attempts > 1 and during.results[0].detail.startswith("unavailable: HTTP 503")
    assert during.results[1].attempts == 0 and during.results[1].detail.startswith(
        "skipped: Nomad unavailable"
    )
    assert executor.problem is None
    clock.advance(60)

    after = executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")])

    assert all(result.ok for result in after.results)
    assert view.eligibility() == "ineligible" and view.meta()["gpuhealth.state"] == "unhealthy"


def test_transient_503s_are_retried_within_the_step(
    sim: NomadSim, executor_for: Callable[..., NomadExecutor], view: Any
) -> None:
    """Two 503s on the metadata write: the step waits and succeeds in the same pass (3 attempts)."""
    executor = executor_for(token=sim.management_token)
    sim.faults.inject(verb="create", resource="client", status=503, times=2)

    report = executor.apply([SetStateLabel("unhealthy")])

    assert report.results[0].ok and report.results[0].attempts == 3
    assert view.meta()["gpuhealth.state"] == "unhealthy"
