"""The Nomad executor's step mapping against the emulated Nomad over HTTP: each step, ownership, zero writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from waiting import HANG_GUARD_S

from core.steps import (
    Cordon,
    EmitEvent,
    RemoveTaint,
    SetCondition,
    SetIncidentAnnotation,
    SetStateLabel,
    SetTaint,
    SetUnhealthyGpus,
    Uncordon,
)
from remediation.nomad.executor import NomadExecutor

NODE = "gpu-node-0"
GPUS = ("GPU-1111", "GPU-0000")


def test_metadata_steps_write_the_contract_keys_in_one_request(view: Any, executor: NomadExecutor) -> None:
    """State, incident, unhealthy GPUs and the condition go out as one metadata write, with the contract's
    keys (gpuhealth.state / incident / unhealthy_gpus) that job constraints can read."""
    writes = executor.writes_total

    report = executor.apply(
        [
            SetCondition("False", "XID_79", "GPU has fallen off the bus"),
            SetStateLabel("unhealthy"),
            SetIncidentAnnotation("inc-1"),
            SetUnhealthyGpus(tuple(sorted(GPUS))),
        ]
    )

    assert all(result.ok for result in report.results)
    assert executor.writes_total - writes == 1
    assert view.ours() == {
        "gpuhealth.condition": "False",
        "gpuhealth.reason": "XID_79",
        "gpuhealth.message": "GPU has fallen off the bus",
        "gpuhealth.state": "unhealthy",
        "gpuhealth.incident": "inc-1",
        "gpuhealth.unhealthy_gpus": "GPU-0000,GPU-1111",
    }
    facts = executor.facts()
    assert (facts.state_label, facts.incident_annotation) == ("unhealthy", "inc-1")
    assert facts.unhealthy_gpus == ("GPU-0000", "GPU-1111")
    assert (facts.condition_status, facts.condition_reason) == ("False", "XID_79")


def test_clearing_the_incident_removes_its_keys(view: Any, executor: NomadExecutor) -> None:
    """SetIncidentAnnotation(None) and an empty GPU list delete the keys instead of leaving empty strings."""
    executor.apply([SetIncidentAnnotation("inc-1"), SetUnhealthyGpus(("GPU-0000",))])

    executor.apply([SetIncidentAnnotation(None), SetUnhealthyGpus(())])

    assert "gpuhealth.incident" not in view.meta()
    assert "gpuhealth.unhealthy_gpus" not in view.meta()
    assert executor.facts().unhealthy_gpus == ()


def test_set_taint_makes_the_node_ineligible_and_records_that_we_did(
    view: Any, executor: NomadExecutor
) -> None:
    """Quarantine = eligibility ineligible, plus gpuhealth.quarantine and gpuhealth.ineligible_by=gpuhealth."""
    report = executor.apply([SetTaint("reboot")])

    assert report.results[0].ok, report.results[0].detail
    assert view.eligibility() == "ineligible"
    assert view.meta()["gpuhealth.quarantine"] == "reboot:NoSchedule"
    assert view.meta()["gpuhealth.ineligible_by"] == "gpuhealth"
    facts = executor.facts()
    assert (facts.taint_value, facts.taint_effect, facts.unschedulable) == ("reboot", "NoSchedule", True)


def test_remove_taint_restores_eligibility_we_changed(view: Any, executor: NomadExecutor) -> None:
    """Release: eligible again and our keys gone."""
    executor.apply([SetTaint("reboot")])

    report = executor.apply([RemoveTaint()])

    assert report.results[0].detail == "quarantine lifted: node eligible again"
    assert view.eligibility() == "eligible"
    assert not {"gpuhealth.quarantine", "gpuhealth.ineligible_by"} & set(view.meta())
    assert executor.facts().taint_value is None


def test_a_humans_ineligibility_is_never_undone(
    view: Any, executor: NomadExecutor, executor_for: Callable[..., NomadExecutor]
) -> None:
    """A node an operator had made ineligible stays ineligible after our quarantine is lifted."""
    human = view.sim.client(node=NODE)
    human.node.eligible_node(view.id, ineligible=True)
    executor.apply([SetTaint("reset_gpu")])
    assert "gpuhealth.ineligible_by" not in view.meta()

    report = executor.apply([RemoveTaint()])

    assert "someone else's" in report.results[0].detail
    assert view.eligibility() == "ineligible"
    assert "gpuhealth.quarantine" not in view.meta()


def test_taint_and_cordon_release_eligibility_only_when_both_are_lifted(
    view: Any, executor: NomadExecutor
) -> None:
    """Quarantine and cordon both ours: lifting the quarantine keeps the node ineligible for the cordon;
    the uncordon then makes it eligible."""
    executor.apply([SetTaint("reboot"), Cordon()])
    assert executor.facts().cordoned_by_us

    executor.apply([RemoveTaint()])
    assert view.eligibility() == "ineligible"

    executor.apply([Uncordon()])
    assert view.eligibility() == "eligible"
    assert not {"gpuhealth.cordoned", "gpuhealth.ineligible_by"} & set(view.meta())


def test_a_node_made_eligible_by_someone_else_reads_as_drift(view: Any, executor: NomadExecutor) -> None:
    """Our quarantine key is there but the node is eligible again: the facts show no quarantine, so the
    planner adds it back (as a removed taint is re-added on Kubernetes), and the watch wakes the loop."""
    executor.apply([SetTaint("reboot")])
    assert not executor.wait_for_change(0.5), "our own quarantine woke the loop"

    view.sim.client(node=NODE).node.eligible_node(view.id, eligible=True)

    assert executor.wait_for_change(HANG_GUARD_S), "the watch did not report the change"
    assert executor.facts().taint_value is None
    executor.apply([SetTaint("reboot")])
    assert view.eligibility() == "ineligible"


def test_our_own_writes_do_not_wake_the_loop(executor: NomadExecutor) -> None:
    """The watch tells our writes from other people's: applying steps is no reason for another pass."""
    executor.wait_for_change(0)

    executor.apply([SetStateLabel("healthy"), SetCondition("True", "AllChecksPassed", "ok")])

    assert not executor.wait_for_change(0.5)


def test_emit_event_is_logged_not_written(executor: NomadExecutor) -> None:
    """Nomad has no custom node events: the step succeeds without a request."""
    writes, requests = executor.writes_total, executor.requests_total

    report = executor.apply([EmitEvent("GPUHealthUnhealthy", "incident inc-1", "inc-1/opened/reboot")])

    assert report.results[0].ok
    assert (executor.writes_total, executor.requests_total) == (writes, requests)


def test_facts_come_from_the_watch_without_a_request_per_call(executor: NomadExecutor) -> None:
    """facts() is served from the blocking-query watch: a thousand calls send nothing."""
    requests = executor.requests_total

    for _ in range(1000):
        executor.facts()

    assert executor.requests_total - requests <= 1  # at most the watch's own next long-poll


def test_dry_run_sends_nothing(view: Any, executor: NomadExecutor) -> None:
    """--dry-run: every step reported, no request sent, the node as it was."""
    before = view.node()["ModifyIndex"]
    writes = executor.writes_total

    report = executor.apply([SetTaint("reboot"), SetStateLabel("unhealthy")], dry_run=True)

    assert [r.detail for r in report.results] == ["dry-run", "dry-run"]
    assert executor.writes_total == writes
    assert view.node()["ModifyIndex"] == before
