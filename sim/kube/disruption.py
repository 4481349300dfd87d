"""PodDisruptionBudget arithmetic and the Eviction API's decision, as kube-apiserver and the disruption
controller make them.

Sources: "Specifying a Disruption Budget for your Application"
(https://kubernetes.io/docs/tasks/run-application/configure-pdb/), "API-initiated Eviction"
(https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/), "Disruptions"
(https://kubernetes.io/docs/concepts/workloads/pods/disruptions/) and the policy/v1 API reference.

- healthy pods are those with condition ``Ready=True`` and no ``deletionTimestamp``;
- an integer ``minAvailable`` is the desired healthy count and the expected count is the number of
  selected pods; a percentage ``minAvailable`` or any ``maxUnavailable`` is scaled against the pods'
  controllers' replica counts, rounding up; pods without a scalable controller (bare pods, Jobs,
  DaemonSets) make such a budget fail safe to zero disruptions ("Arbitrary workloads and PDBs");
- ``disruptionsAllowed = currentHealthy - desiredHealthy``, never below zero;
- Pending, Succeeded, Failed and already-terminating pods are evicted without consulting any budget;
- a pod covered by more than one budget cannot be evicted (500);
- a not-Ready pod may be evicted under ``unhealthyPodEvictionPolicy: AlwaysAllow``, or under the default
  ``IfHealthyBudget`` when the application is not disrupted (``currentHealthy >= desiredHealthy > 0``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sim.kube.protocols import KubeObject
from sim.kube.selectors import SelectorError, label_selector_from_spec

__all__ = [
    "DISRUPTION_BUDGET_CAUSE",
    "EVICTION_BLOCKED_MESSAGE",
    "MULTIPLE_PDBS_MESSAGE",
    "BudgetStatus",
    "EvictionDecision",
    "budget_status",
    "controller_ref",
    "disruption_target_condition",
    "disruptions_allowed",
    "eviction_decision",
    "is_pod_ready",
    "matching_pdbs",
]

EVICTION_BLOCKED_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"

# Controllers whose replica count the disruption controller can read (its "finders" plus /scale).
_SCALABLE_KINDS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet", "Deployment"})
_TERMINAL_OR_PENDING = frozenset({"Pending", "Succeeded", "Failed"})


@dataclass(frozen=True)
class EvictionDecision:
    """What the eviction subresource answers.

    ``status_code`` is 201 when the pod may be deleted, 429 when a budget blocks it, 500 when several
    budgets cover it. ``reason`` is the ``Status.reason`` of a refusal (empty when allowed); ``message``
    is the ``Status.message`` (for an allowed eviction, a note for logs). ``cause_type`` /
    ``cause_message`` go into ``Status.details.causes`` and ``retry_after_seconds`` into
    ``details.retryAfterSeconds`` when set.
    """

    allowed: bool
    status_code: int
    reason: str
    message: str
    pdb: str | None
    cause_type: str | None = None
    cause_message: str | None = None
    retry_after_seconds: int | None = None


@dataclass(frozen=True)
class BudgetStatus:
    """The figures the disruption controller writes into ``PodDisruptionBudget.status``."""

    expected_pods: int
    desired_healthy: int
    current_healthy: int
    disruptions_allowed: int
    # Set when the controller cannot compute the budget (a percentage or maxUnavailable over pods whose
    # owner has no scale subresource): it then writes only disruptionsAllowed 0 and a SyncFailed condition.
    sync_error: str | None = None


def is_pod_ready(pod: KubeObject) -> bool:
    """Condition ``Ready`` is ``True`` (podutil.IsPodReady)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _is_terminating(pod: KubeObject) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def controller_ref(obj: KubeObject) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner  # type: ignore[no-any-return]
    return None


def _namespace(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def _selected_pods(pdb: KubeObject, pods: Iterable[KubeObject]) -> list[KubeObject]:
    try:
        selector = label_selector_from_spec((pdb.get("spec") or {}).get("selector"))
    except SelectorError:
        return []  # an invalid selector matches nothing, as in the eviction code
    namespace = _namespace(pdb)
    return [
        pod
        for pod in pods
        if _namespace(pod) == namespace and selector.matches((pod.get("metadata") or {}).get("labels") or {})
    ]


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.endswith("%"):
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"invalid PodDisruptionBudget value {value!r}: an integer or a percentage"
            ) from None
    return math.ceil(int(text[:-1]) * total / 100)


def _is_percent(value: Any) -> bool:
    return isinstance(value, str) and value.strip().endswith("%")


def _expected_scale(pods: list[KubeObject], controller_replicas: Mapping[str, int] | None) -> int | None:
    """Sum of the replica counts of the selected pods' controllers; None when one cannot be found.

    The controller's ``spec.replicas`` comes from ``controller_replicas`` (uid -> replicas) when the
    caller knows it; otherwise the selected pods a scalable controller owns stand in for its replicas.
    """
    replicas: dict[str, int] = {}
    for pod in pods:
        owner = controller_ref(pod)
        if owner is None:
            return None  # "found no controller ref for pod": the controller fails safe
        uid = str(owner.get("uid"))
        if controller_replicas is not None and uid in controller_replicas:
            replicas[uid] = controller_replicas[uid]
        elif owner.get("kind") in _SCALABLE_KINDS:
            replicas[uid] = replicas.get(uid, 0) + 1
        else:
            return None  # no scale subresource (Job, DaemonSet, most custom resources)
    return sum(replicas.values())


def budget_status(
    pdb: KubeObject,
    namespace_pods: Iterable[KubeObject],
    *,
    controller_replicas: Mapping[str, int] | None = None,
) -> BudgetStatus:
    """Compute a budget's status the way the disruption controller does (pkg/controller/disruption)."""
    pods = _selected_pods(pdb, namespace_pods)
    spec = pdb.get("spec") or {}
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    current_healthy = sum(1 for pod in pods if not _is_terminating(pod) and is_pod_ready(pod))
    expected: int | None
    if max_unavailable is not None:
        expected = _expected_scale(pods, controller_replicas)
        desired = max(expected - _scaled(max_unavailable, expected), 0) if expected is not None else 0
    elif min_available is not None and not _is_percent(min_available):
        expected, desired = len(pods), _scaled(min_available, len(pods))
    elif min_available is not None:
        expected = _expected_scale(pods, controller_replicas)
        desired = _scaled(min_available, expected) if expected is not None else 0
    else:
        # Neither field (policy/v1 sets no default): the controller leaves the expected count at 0, which
        # allows no disruption at all.
        expected, desired = 0, 0
    if expected is None:
        error = (
            "the pods' controller has no scale subresource: a percentage or maxUnavailable cannot be computed"
        )
        return BudgetStatus(0, desired, current_healthy, 0, sync_error=error)
    allowed = current_healthy - desired
    return BudgetStatus(expected, desired, current_healthy, allowed if expected > 0 and allowed > 0 else 0)


def disruptions_allowed(
    pdb: KubeObject, namespace_pods: list[KubeObject], *, controller_replicas: Mapping[str, int] | None = None
) -> int:
    """``status.disruptionsAllowed`` of ``pdb`` given every pod of its namespace."""
    return budget_status(pdb, namespace_pods, controller_replicas=controller_replicas).disruptions_allowed


def matching_pdbs(pod: KubeObject, pdbs: Iterable[KubeObject]) -> list[KubeObject]:
    """The budgets of the pod's namespace whose selector matches its labels."""
    return [pdb for pdb in pdbs if _selected_pods(pdb, [pod])]


def _pdb_name(pdb: KubeObject) -> str:
    return str((pdb.get("metadata") or {}).get("name"))


def _allowed(message: str, pdb: str | None = None) -> EvictionDecision:
    return EvictionDecision(True, 201, "", message, pdb)


def eviction_decision(
    pod: KubeObject,
    pdbs: list[KubeObject],
    namespace_pods: list[KubeObject],
    *,
    controller_replicas: Mapping[str, int] | None = None,
) -> EvictionDecision:
    """Whether ``POST .../pods/<name>/eviction`` may delete ``pod``, and what the server answers if not.

    ``pdbs`` and ``namespace_pods`` are the budgets and pods of the pod's namespace (``pod`` among them).
    """
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if _is_terminating(pod) or phase in _TERMINAL_OR_PENDING:
        # canIgnorePDB: a pod that is not running, or already going, causes no new disruption.
        return _allowed(f"pod is {'terminating' if _is_terminating(pod) else phase}: budgets do not apply")
    covering = matching_pdbs(pod, pdbs)
    if len(covering) > 1:
        return EvictionDecision(False, 500, "", MULTIPLE_PDBS_MESSAGE, None)  # a Status without reason
    if not covering:
        return _allowed("no PodDisruptionBudget covers the pod")
    pdb = covering[0]
    name = _pdb_name(pdb)
    status = budget_status(pdb, namespace_pods, controller_replicas=controller_replicas)
    exemption = _unhealthy_pod_exemption(pod, pdb, status)
    if exemption is not None:
        return _allowed(exemption, name)
    if status.disruptions_allowed <= 0:
        return EvictionDecision(
            False,
            429,
            "TooManyRequests",
            EVICTION_BLOCKED_MESSAGE,
            name,
            cause_type=DISRUPTION_BUDGET_CAUSE,
            cause_message=(
                f"The disruption budget {name} needs {status.desired_healthy} healthy pods "
                f"and has {status.current_healthy} currently"
            ),
            retry_after_seconds=0,
        )
    return _allowed(f"the budget allows {status.disruptions_allowed} disruption(s)", name)


def _unhealthy_pod_exemption(pod: KubeObject, pdb: KubeObject, status: BudgetStatus) -> str | None:
    """Why a not-Ready pod may go despite the budget (unhealthyPodEvictionPolicy), or None."""
    if is_pod_ready(pod):
        return None
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
    if policy == "AlwaysAllow":
        return "pod is not ready and the budget's unhealthyPodEvictionPolicy is AlwaysAllow"
    if status.current_healthy >= status.desired_healthy > 0:
        return "pod is not ready and the budget's application is not disrupted"
    return None


def disruption_target_condition(reason: str, message: str, now: str) -> KubeObject:
    """The ``DisruptionTarget`` pod condition (``EvictionByEvictionAPI`` / "Eviction API: evicting", or
    ``DeletionByTaintManager`` / "Taint manager: deleting due to NoExecute taint"), per "Pod disruption
    conditions" in https://kubernetes.io/docs/concepts/workloads/pods/disruptions/."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
