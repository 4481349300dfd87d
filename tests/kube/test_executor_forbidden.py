"""A 403 from the API server (RBAC without a verb, or an admission policy denying the change) is handled
like Nomad's refused token: one error line naming what was refused, every write held for
``forbidden_hold_s`` instead of retried pass after pass, ``problem`` (and with it the unknown
``EXECUTOR_FORBIDDEN`` finding) while held, and recovery once the permission is back.

The refusals come from the emulator's fault injector, over real HTTP, worded the way the API server words
them; the hold runs on the emulator's manual clock.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from structlog.testing import capture_logs

from core.clock import ManualClock
from core.findings import Status
from core.steps import SetCondition, SetStateLabel, SetTaint
from remediation.executor.problem import CODE, ExecutorProblemFindings
from remediation.kubernetes.errors import refusal_of
from remediation.kubernetes.executor import KubernetesExecutor
from sim.kube.harness import KubeSim
from sim.kube.kubeconfig import DUMMY_TOKEN

HOLD_S = 300.0
StoredNode = Callable[..., dict[str, Any]]
RBAC_MESSAGE = (
    'nodes "gpu-node-0" is forbidden: User "system:serviceaccount:gpuhealth:gpuhealth-agent" cannot patch '
    'resource "nodes" in API group "" at the cluster scope'
)
POLICY_SAYS = "the gpuhealth agent may change only its own label gpuhealth.io/state"
ADMISSION_MESSAGE = (
    "nodes \"gpu-node-0\" is forbidden: ValidatingAdmissionPolicy 'gpuhealth-agent-node-writes' with binding "
    f"'gpuhealth-agent-node-writes' denied request: {POLICY_SAYS}"
)


def refuse_patches(sim: KubeSim, message: str = RBAC_MESSAGE) -> None:
    """Every patch of the node (and of its status) answers 403 until the faults are cleared."""
    sim.faults.inject(verb="patch", resource="nodes", status=403, seconds=86_400, message=message)


def errors_in(logs: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["log_level"] == "error"]


@pytest.fixture
def executor(make_executor: Callable[..., KubernetesExecutor]) -> KubernetesExecutor:
    """The executor of ``gpu-node-0`` with the default-sized hold."""
    return make_executor(forbidden_hold_s=HOLD_S)


def test_an_rbac_403_is_one_error_line_naming_the_verb_and_resource_and_holds_the_rest_of_the_pass(
    executor: KubernetesExecutor, sim: KubeSim
) -> None:
    """The label patch is refused once (not retried), the taint step after it sends nothing, one error line
    names patch/nodes and the missing permission, and no line carries the token."""
    refuse_patches(sim)
    writes = executor.writes_total

    with capture_logs() as logs:
        results = executor.apply([SetStateLabel("unhealthy"), SetTaint("reboot")]).results

    assert [(result.ok, result.attempts) for result in results] == [(False, 1), (False, 0)]
    assert results[0].detail.startswith("HTTP 403 forbidden: ") and "patch nodes" in results[0].detail
    assert results[1].detail.startswith("skipped: ")
    assert executor.writes_total - writes == 1
    [error] = errors_in(logs)
    assert (error["event"], error["verb"], error["resource"], error["cause"]) == (
        "kubernetes_forbidden",
        "patch",
        "nodes",
        "rbac",
    )
    assert "RBAC" in error["problem"] and "admission" not in error["problem"]
    assert not [entry for entry in logs if entry["log_level"] == "warning"]
    assert DUMMY_TOKEN not in repr(logs)


def test_a_refused_status_patch_names_the_status_subresource(
    executor: KubernetesExecutor, sim: KubeSim
) -> None:
    """The condition lives on nodes/status: that is what the ClusterRole must grant, so that is named."""
    refuse_patches(sim)

    result = executor.apply([SetCondition("False", "XID_79", "GPU has fallen off the bus")]).results[0]

    assert not result.ok
    assert "patch nodes/status" in (executor.problem or "")


def test_writes_stay_held_for_forbidden_hold_s_without_a_request_or_another_log_line(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock
) -> None:
    """Passes within the hold send nothing and log no error; the problem (the finding) stays."""
    refuse_patches(sim)
    executor.apply([SetStateLabel("unhealthy")])
    writes = executor.writes_total

    with capture_logs() as logs:
        for _ in range(5):
            clock.advance(HOLD_S / 6)
            result = executor.apply([SetStateLabel("unhealthy")]).results[0]
            assert (result.ok, result.attempts) == (False, 0)
            assert result.detail.startswith("skipped: ")

    assert executor.writes_total == writes
    assert errors_in(logs) == []
    assert executor.problem is not None


def test_still_refused_after_the_hold_one_attempt_a_new_hold_and_no_second_error_line(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock
) -> None:
    """After the hold one write is tried; refused again, it starts another hold without repeating the log."""
    refuse_patches(sim)
    with capture_logs() as logs:
        executor.apply([SetStateLabel("unhealthy")])
        clock.advance(HOLD_S + 1)
        writes = executor.writes_total
        again = executor.apply([SetStateLabel("unhealthy"), SetTaint("reboot")]).results

    assert [(result.ok, result.attempts) for result in again] == [(False, 1), (False, 0)]
    assert executor.writes_total - writes == 1
    assert [entry["event"] for entry in errors_in(logs)] == ["kubernetes_forbidden"]


def test_the_permission_coming_back_ends_the_problem_at_the_first_write_after_the_hold(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock, stored_node: StoredNode
) -> None:
    """RBAC fixed: the next attempt after the hold writes the label, ``problem`` is gone, and one info line
    says writes are allowed again."""
    refuse_patches(sim)
    executor.apply([SetStateLabel("unhealthy")])
    sim.faults.clear()
    clock.advance(HOLD_S + 1)

    with capture_logs() as logs:
        result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert result.ok
    assert stored_node()["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"
    assert executor.problem is None
    assert [entry["event"] for entry in logs].count("kubernetes_writes_allowed_again") == 1


def test_the_executor_problem_is_an_unknown_executor_forbidden_finding_until_recovery(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock
) -> None:
    """The finding source the agent wires for this executor: unknown, node level, action none, while held;
    nothing once a write went through."""
    source = ExecutorProblemFindings(executor)
    snapshot: Any = None  # the source reads only the executor
    refuse_patches(sim)
    executor.apply([SetStateLabel("unhealthy")])

    [finding] = source.findings(snapshot)

    assert (finding.code, finding.status, finding.gpu, finding.check) == (
        CODE,
        Status.UNKNOWN,
        None,
        "executor",
    )
    assert "patch nodes" in finding.message
    sim.faults.clear()
    clock.advance(HOLD_S + 1)
    executor.apply([SetStateLabel("unhealthy")])
    assert source.findings(snapshot) == []


def test_an_admission_policy_403_says_refused_by_admission_policy_with_the_policy_message(
    executor: KubernetesExecutor, sim: KubeSim
) -> None:
    """The chart's ValidatingAdmissionPolicy denying a change is also a 403, but not a missing permission:
    the problem says so and quotes the policy, and the log marks the cause as admission."""
    refuse_patches(sim, ADMISSION_MESSAGE)

    with capture_logs() as logs:
        result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert not result.ok
    problem = executor.problem or ""
    assert "refused by admission policy" in problem and POLICY_SAYS in problem
    assert "RBAC" not in problem
    [error] = errors_in(logs)
    assert (error["cause"], error["verb"], error["resource"]) == ("admission", "patch", "nodes")


def test_a_policy_denial_answered_422_is_an_admission_refusal_and_holds(
    executor: KubernetesExecutor, sim: KubeSim
) -> None:
    """A ValidatingAdmissionPolicy whose validation sets no ``reason`` denies with 422 Invalid (kube-apiserver,
    tests/realkube): still a refusal of this agent's change, so the same single error line, the policy's
    words, the status as the server gave it, and the hold (no second request within it)."""
    invalid = ADMISSION_MESSAGE.replace("is forbidden", "is invalid")
    sim.faults.inject(verb="patch", resource="nodes", status=422, seconds=86_400, message=invalid)

    with capture_logs() as logs:
        first = executor.apply([SetStateLabel("unhealthy")]).results[0]
        requests = executor.requests_total
        second = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert not first.ok and not second.ok
    assert executor.requests_total == requests, "a write was sent during the hold"
    problem = executor.problem or ""
    assert "refused by admission policy (HTTP 422)" in problem and POLICY_SAYS in problem
    [error] = errors_in(logs)
    assert error["cause"] == "admission"


def test_a_webhook_denial_is_an_admission_refusal_too() -> None:
    """``admission webhook "..." denied the request: ...`` reads as admission, with the webhook's words."""
    body = (
        '{"kind":"Status","status":"Failure","reason":"Forbidden","code":403,"message":'
        '"admission webhook \\"policy.example.com\\" denied the request: node taints are managed by ops"}'
    )
    error = ApiException(status=403, reason="Forbidden", body=body)

    refusal = refusal_of(error, verb="patch", resource="nodes")

    assert refusal.by_admission
    assert refusal.policy_message == "node taints are managed by ops"


def test_other_client_errors_are_not_a_refusal_and_do_not_hold(
    executor: KubernetesExecutor, sim: KubeSim
) -> None:
    """A 422 fails the step as before: no hold, no problem, the next pass tries again."""
    sim.faults.inject(verb="patch", resource="nodes", status=422, times=1)

    first = executor.apply([SetStateLabel("unhealthy")]).results[0]
    second = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert (first.ok, second.ok) == (False, True)
    assert executor.problem is None
