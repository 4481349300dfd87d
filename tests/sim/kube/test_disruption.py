"""PodDisruptionBudget arithmetic and eviction decisions follow the Kubernetes documentation.

https://kubernetes.io/docs/tasks/run-application/configure-pdb/ ("Specifying a Disruption Budget",
"Rounding logic when specifying percentages", "Unhealthy Pod Eviction Policy", "Arbitrary workloads")
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ (responses 200/429/500)
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.kube.disruption import (
    EVICTION_BLOCKED_MESSAGE,
    MULTIPLE_PDBS_MESSAGE,
    budget_status,
    disruption_target_condition,
    disruptions_allowed,
    eviction_decision,
)


def _pod(
    name: str,
    *,
    ready: bool = True,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    owner_kind: str | None = "ReplicaSet",
    owner_uid: str = "rs-1",
    terminating: bool = False,
    namespace: str = "ml",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}}
    if owner_kind:
        metadata["ownerReferences"] = [
            {"kind": owner_kind, "name": "o", "uid": owner_uid, "controller": True}
        ]
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {
        "metadata": metadata,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _pdb(name: str = "web", selector: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}} if selector is None else selector,
        **spec,
    }
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": body}


def _pods(count: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [_pod(f"web-{i}", **kwargs) for i in range(count)]


def test_integer_min_available_allows_healthy_minus_desired() -> None:
    """configure-pdb: minAvailable 2 of 3 healthy -> 1 disruption allowed."""
    assert disruptions_allowed(_pdb(minAvailable=2), _pods(3)) == 1
    assert disruptions_allowed(_pdb(minAvailable=3), _pods(3)) == 0


def test_only_ready_pods_not_being_deleted_count_as_healthy() -> None:
    """A pod is healthy when its Ready condition is True; a terminating pod is no longer healthy."""
    pods = [*_pods(2), _pod("web-x", ready=False), _pod("web-y", terminating=True)]
    status = budget_status(_pdb(minAvailable=1), pods)
    assert status.current_healthy == 2
    assert status.disruptions_allowed == 1


def test_percentages_round_up() -> None:
    """configure-pdb 'Rounding logic': minAvailable and maxUnavailable percentages are rounded up."""
    # 7 replicas, minAvailable 50% -> desired ceil(3.5) = 4 -> 3 allowed.
    assert budget_status(_pdb(minAvailable="50%"), _pods(7)).desired_healthy == 4
    assert disruptions_allowed(_pdb(minAvailable="50%"), _pods(7)) == 3
    # 7 replicas, maxUnavailable 50% -> ceil(3.5) = 4 unavailable -> desired 3 -> 4 allowed.
    assert disruptions_allowed(_pdb(maxUnavailable="50%"), _pods(7)) == 4


def test_max_unavailable_integer() -> None:
    assert disruptions_allowed(_pdb(maxUnavailable=1), _pods(4)) == 1
    assert disruptions_allowed(_pdb(maxUnavailable=1), [*_pods(3), _pod("web-9", ready=False)]) == 0
    assert disruptions_allowed(_pdb(maxUnavailable=0), _pods(4)) == 0


def test_expected_count_uses_controller_replicas_when_known() -> None:
    """Percentages scale against the controller's replicas, not the pods that happen to exist."""
    pods = _pods(3)  # the ReplicaSet wants 4, one is missing
    assert disruptions_allowed(_pdb(maxUnavailable=1), pods, controller_replicas={"rs-1": 4}) == 0
    assert disruptions_allowed(_pdb(maxUnavailable=1), pods) == 1


def test_max_unavailable_or_percent_without_a_scalable_controller_fails_safe() -> None:
    """configure-pdb 'Arbitrary workloads': bare pods or other controllers support only an integer
    minAvailable; otherwise the disruption controller cannot find the scale and allows nothing."""
    bare = _pods(3, owner_kind=None)
    assert disruptions_allowed(_pdb(maxUnavailable=1), bare) == 0
    assert disruptions_allowed(_pdb(minAvailable="50%"), bare) == 0
    jobs = _pods(3, owner_kind="Job")
    assert disruptions_allowed(_pdb(maxUnavailable=1), jobs) == 0
    assert disruptions_allowed(_pdb(minAvailable=2), jobs) == 1
    assert disruptions_allowed(_pdb(maxUnavailable=1), jobs, controller_replicas={"rs-1": 3}) == 1


def test_pdb_with_neither_field_allows_nothing() -> None:
    assert disruptions_allowed(_pdb(), _pods(3)) == 0


def test_null_selector_selects_nothing_and_empty_selects_the_namespace() -> None:
    """policy/v1: 'A null selector will match no pods, while an empty ({}) selector will select all pods
    within its namespace.'"""
    null_pdb = _pdb(minAvailable=1)
    null_pdb["spec"]["selector"] = None
    assert budget_status(null_pdb, _pods(3)).expected_pods == 0
    everything = _pdb(selector={}, minAvailable=1)
    pods = [*_pods(2), _pod("other", labels={"app": "db"}), _pod("elsewhere", namespace="prod")]
    assert budget_status(everything, pods).expected_pods == 3


def test_eviction_without_budget_is_allowed() -> None:
    decision = eviction_decision(_pod("web-0"), [], _pods(1))
    assert decision.allowed
    assert decision.status_code == 201


def test_eviction_blocked_by_budget_is_429_with_disruption_budget_cause() -> None:
    """api-eviction: 429 Too Many Requests 'Cannot evict pod as it would violate the pod's disruption
    budget.' with a cause of type DisruptionBudget."""
    pods = _pods(2)
    decision = eviction_decision(pods[0], [_pdb(minAvailable=2)], pods)
    assert not decision.allowed
    assert (decision.status_code, decision.reason) == (429, "TooManyRequests")
    assert decision.message == EVICTION_BLOCKED_MESSAGE
    assert decision.cause_type == "DisruptionBudget"
    assert decision.cause_message == "The disruption budget web needs 2 healthy pods and has 2 currently"
    assert decision.pdb == "web"


def test_eviction_within_budget_is_allowed_and_names_the_budget() -> None:
    pods = _pods(3)
    decision = eviction_decision(pods[0], [_pdb(minAvailable=2)], pods)
    assert decision.allowed
    assert decision.pdb == "web"


def test_more_than_one_budget_is_500() -> None:
    """api-eviction: several PDBs for one pod -> 500, a Status without reason (as kube-apiserver 1.37 answers,
    tests/realkube/test_differential.py)."""
    pods = _pods(3)
    decision = eviction_decision(pods[0], [_pdb("a", minAvailable=1), _pdb("b", minAvailable=1)], pods)
    assert (decision.allowed, decision.status_code, decision.reason) == (False, 500, "")
    assert decision.message == MULTIPLE_PDBS_MESSAGE
    assert "more than one PodDisruptionBudget" in decision.message


@pytest.mark.parametrize(
    "pod",
    [
        _pod("p", phase="Pending", ready=False),
        _pod("s", phase="Succeeded", ready=False),
        _pod("f", phase="Failed", ready=False),
        _pod("t", terminating=True),
    ],
)
def test_pending_terminal_and_terminating_pods_ignore_budgets(pod: dict[str, Any]) -> None:
    """The eviction subresource deletes pods that are Pending, finished or already terminating without
    consulting budgets (they cause no new disruption): even a blocking budget, even two budgets."""
    budgets = [_pdb("a", minAvailable=10), _pdb("b", minAvailable=10)]
    assert eviction_decision(pod, budgets, [pod]).allowed


def test_unhealthy_pod_if_healthy_budget_allows_when_application_is_not_disrupted() -> None:
    """IfHealthyBudget (default): a Running but not Ready pod can be evicted only if currentHealthy is
    at least desiredHealthy."""
    sick = _pod("web-sick", ready=False)
    healthy_enough = [*_pods(2), sick]
    assert eviction_decision(sick, [_pdb(minAvailable=2)], healthy_enough).allowed
    disrupted = [*_pods(1), sick]
    decision = eviction_decision(sick, [_pdb(minAvailable=2)], disrupted)
    assert (decision.allowed, decision.status_code) == (False, 429)


def test_unhealthy_pod_always_allow_policy() -> None:
    """AlwaysAllow: not-ready running pods may always be evicted."""
    sick = _pod("web-sick", ready=False)
    pdb = _pdb(minAvailable=5, unhealthyPodEvictionPolicy="AlwaysAllow")
    assert eviction_decision(sick, [pdb], [sick]).allowed
    healthy = _pod("web-ok")
    assert not eviction_decision(healthy, [pdb], [sick, healthy]).allowed


def test_budget_of_another_label_does_not_cover_the_pod() -> None:
    pods = _pods(1)
    other = _pdb("db", selector={"matchLabels": {"app": "db"}}, minAvailable=5)
    assert eviction_decision(pods[0], [other], pods).allowed


def test_disruption_target_condition_shape() -> None:
    """Pod disruption conditions: type DisruptionTarget, status True, reason names the cause."""
    condition = disruption_target_condition(
        "EvictionByEvictionAPI", "Eviction API: evicting", "2026-01-01T00:00:00Z"
    )
    assert condition["type"] == "DisruptionTarget"
    assert condition["status"] == "True"
    assert condition["reason"] == "EvictionByEvictionAPI"
