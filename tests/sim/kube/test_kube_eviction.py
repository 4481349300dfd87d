"""Conformance of the Eviction API and PodDisruptionBudgets through the official client.

API-initiated Eviction = https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/
Disruption budgets     = https://kubernetes.io/docs/tasks/run-application/configure-pdb/
Pod disruption conditions = https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from core.clock import ManualClock
from sim.kube.harness import KubeSim


def _running_pod(
    core: client.CoreV1Api, sim: KubeSim, name: str, node: str = "n1", grace: int = 30, **labels: str
) -> None:
    spec = {
        "nodeName": node,
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "c", "image": "busybox:1.36"}],
    }
    core.create_namespaced_pod("default", {"metadata": {"name": name, "labels": labels}, "spec": spec})
    # The kubelet's part, done by hand: the pod runs and is Ready.
    core.patch_namespaced_pod_status(
        name, "default", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )


def _pdb(policy: client.PolicyV1Api, name: str, selector: dict[str, str], min_available: int) -> None:
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
        },
    )


def _evict(core: client.CoreV1Api, name: str, grace: int | None = None) -> Any:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
    }
    if grace is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": grace}
    return core.create_namespaced_pod_eviction(name, "default", body, _preload_content=False)


def test_eviction_of_a_missing_pod_is_404(core: client.CoreV1Api) -> None:
    """API-initiated Eviction: evicting a pod that does not exist answers 404 NotFound."""
    with pytest.raises(ApiException) as caught:
        _evict(core, "ghost")
    assert caught.value.status == 404


def test_allowed_eviction_marks_disruption_target_and_deletes_gracefully(
    bare_kube_sim: KubeSim, core: client.CoreV1Api, manual_clock: ManualClock
) -> None:
    """API-initiated Eviction + Pod disruption conditions: an allowed eviction answers 201 Success, adds
    DisruptionTarget (reason EvictionByEvictionAPI), sets deletionTimestamp, and the pod is removed
    after its grace period."""
    _running_pod(core, bare_kube_sim, "p1", grace=20)
    answer = _evict(core, "p1")
    assert answer.status == 201
    status = json.loads(answer.data)
    assert status["kind"] == "Status"
    assert status["status"] == "Success"
    pod = core.read_namespaced_pod("p1", "default")
    assert pod.metadata.deletion_timestamp is not None
    target = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert target[0].status == "True"
    assert target[0].reason == "EvictionByEvictionAPI"
    manual_clock.advance(19)
    assert core.read_namespaced_pod("p1", "default") is not None
    manual_clock.advance(2)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("p1", "default")
    assert caught.value.status == 404


def test_eviction_blocked_by_pdb_is_429_with_disruption_budget_cause(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """Disruption budgets + API-initiated Eviction: a budget with no disruptions allowed answers 429
    TooManyRequests whose details.causes has reason DisruptionBudget; the pod is untouched."""
    policy = client.PolicyV1Api(core.api_client)
    _running_pod(core, bare_kube_sim, "p1", app="train")
    _pdb(policy, "train-pdb", {"app": "train"}, 1)
    with pytest.raises(ApiException) as caught:
        _evict(core, "p1")
    assert caught.value.status == 429
    status = json.loads(caught.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "train-pdb" in status["details"]["causes"][0]["message"]
    assert core.read_namespaced_pod("p1", "default").metadata.deletion_timestamp is None


def test_eviction_allowed_while_budget_has_room_then_blocked(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """Disruption budgets: with minAvailable 1 over two Ready pods one eviction is allowed; the evicted
    pod no longer counts as healthy, so the second is blocked (429)."""
    policy = client.PolicyV1Api(core.api_client)
    _running_pod(core, bare_kube_sim, "p1", app="train")
    _running_pod(core, bare_kube_sim, "p2", app="train")
    _pdb(policy, "train-pdb", {"app": "train"}, 1)
    assert _evict(core, "p1").status == 201
    with pytest.raises(ApiException) as caught:
        _evict(core, "p2")
    assert caught.value.status == 429


def test_pod_covered_by_two_pdbs_is_500(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """API-initiated Eviction: a pod matched by more than one budget cannot be evicted (500)."""
    policy = client.PolicyV1Api(core.api_client)
    _running_pod(core, bare_kube_sim, "p1", app="train", tier="gpu")
    _pdb(policy, "a", {"app": "train"}, 0)
    _pdb(policy, "b", {"tier": "gpu"}, 0)
    with pytest.raises(ApiException) as caught:
        _evict(core, "p1")
    assert caught.value.status == 500
    assert "more than one PodDisruptionBudget" in json.loads(caught.value.body)["message"]


def test_eviction_name_mismatch_is_400(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """API-initiated Eviction: the Eviction's name must be the pod's (400 BadRequest)."""
    _running_pod(core, bare_kube_sim, "p1")
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("p1", "default", body, _preload_content=False)
    assert caught.value.status == 400


def test_eviction_delete_options_grace_period_overrides_the_pods(
    bare_kube_sim: KubeSim, core: client.CoreV1Api, manual_clock: ManualClock
) -> None:
    """API-initiated Eviction: deleteOptions.gracePeriodSeconds in the Eviction sets the grace period."""
    _running_pod(core, bare_kube_sim, "p1", grace=300)
    _evict(core, "p1", grace=5)
    assert core.read_namespaced_pod("p1", "default").metadata.deletion_grace_period_seconds == 5
    manual_clock.advance(6)
    with pytest.raises(ApiException):
        core.read_namespaced_pod("p1", "default")


def test_pending_pod_is_evicted_despite_the_budget(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """API-initiated Eviction: a Pending pod causes no disruption, so budgets do not block it."""
    policy = client.PolicyV1Api(core.api_client)
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p1", "labels": {"app": "t"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        },
    )
    _pdb(policy, "pdb", {"app": "t"}, 5)
    assert _evict(core, "p1").status == 201
