"""Pod, node and taint rules the simulated controllers share, each as the Kubernetes docs define it."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from sim.kube.protocols import Conflict, KubeObject, ObjectStore

log = structlog.get_logger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
DEFAULT_SCHEDULER = "default-scheduler"
DEFAULT_GRACE_SECONDS = 30


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` or an empty mapping."""
    return obj.get("metadata") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid") or "")


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def phase_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return phase_of(pod) in TERMINAL_PHASES


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def format_time(store: ObjectStore) -> str:
    """Now on the store's clock, as the API's RFC 3339 seconds timestamp."""
    return store.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return entry  # type: ignore[no-any-return]
    return None


def set_condition(status: dict[str, Any], new: dict[str, Any], now: str) -> None:
    """Upsert a condition by type; ``lastTransitionTime`` moves only when ``status`` changes."""
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    for index, old in enumerate(conditions):
        if old.get("type") == new["type"]:
            unchanged = old.get("status") == new["status"]
            transition = old.get("lastTransitionTime") if unchanged else now
            conditions[index] = {**old, **new, "lastTransitionTime": transition or now}
            return
    conditions.append({**new, "lastTransitionTime": now})


def node_ready_status(node: Mapping[str, Any]) -> str:
    """The node's ``Ready`` condition status: True, False or Unknown (absent counts as Unknown)."""
    ready = condition(node, "Ready")
    return str(ready.get("status")) if ready else "Unknown"


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in meta(obj).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner  # type: ignore[no-any-return]
    return None


def owner_reference(owner: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """An ownerReference marking ``owner`` as the managing controller (``controller: true``)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- taints and tolerations (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """One toleration matches one taint: same effect (empty = all), same key (empty + Exists = all keys),
    and for operator Equal (the default) the same value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(
    taints: Iterable[Mapping[str, Any]], tolerations: list[Mapping[str, Any]], effects: Iterable[str]
) -> list[Mapping[str, Any]]:
    """The taints with one of ``effects`` that no toleration matches."""
    wanted = set(effects)
    return [
        taint
        for taint in taints
        if taint.get("effect") in wanted and not any(tolerates(t, taint) for t in tolerations)
    ]


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints plus the ones the node lifecycle controller would add for its conditions.

    "Taint nodes by condition": a NotReady node carries ``node.kubernetes.io/not-ready``, an Unknown one
    ``node.kubernetes.io/unreachable`` (NoSchedule and NoExecute), and a cordoned node
    ``node.kubernetes.io/unschedulable:NoSchedule``.
    """
    taints: list[Mapping[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    present = {(t.get("key"), t.get("effect")) for t in taints}

    def add(key: str, effect: str) -> None:
        if (key, effect) not in present:
            taints.append({"key": key, "effect": effect})

    ready = node_ready_status(node)
    if ready != "True":
        key = "node.kubernetes.io/not-ready" if ready == "False" else "node.kubernetes.io/unreachable"
        add(key, "NoSchedule")
    if (node.get("spec") or {}).get("unschedulable"):
        add("node.kubernetes.io/unschedulable", "NoSchedule")
    return taints


# --- node selection (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/) ---------


def _compare(value: str | None, values: list[str], operator: str) -> bool:
    try:
        number, bound = int(value or ""), int(values[0])
    except (ValueError, IndexError):
        return False
    return number > bound if operator == "Gt" else number < bound


def _expression_matches(expression: Mapping[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement; NotIn and DoesNotExist also match an absent label."""
    operator = str(expression.get("operator"))
    values = [str(v) for v in expression.get("values") or []]
    checks = {
        "In": lambda: value is not None and value in values,
        "NotIn": lambda: value is None or value not in values,
        "Exists": lambda: value is not None,
        "DoesNotExist": lambda: value is None,
        "Gt": lambda: _compare(value, values, "Gt"),
        "Lt": lambda: _compare(value, values, "Lt"),
    }
    check = checks.get(operator)
    return bool(check and check())


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # "A null or empty node selector term matches no objects."
    labels = labels_of(node)
    if not all(_expression_matches(e, labels.get(str(e.get("key")))) for e in expressions):
        return False
    node_fields = {"metadata.name": name_of(node)}
    return all(_expression_matches(f, node_fields.get(str(f.get("key")))) for f in fields)


def node_matches_pod(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` (every label equal) and required node affinity (terms ORed, expressions ANDed)."""
    labels = labels_of(node)
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return True
    return any(_term_matches(term, node) for term in affinity.get("nodeSelectorTerms") or [])


# --- resources (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/) ---------


def _container_amount(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    # Extended resources: requests must equal limits, and a limit alone implies the request.
    for source in ("requests", "limits"):
        value = (resources.get(source) or {}).get(resource)
        if value is not None:
            return int(str(value))
    return 0


def pod_request(pod_spec: Mapping[str, Any], resource: str = GPU_RESOURCE) -> int:
    """Effective request of an integer extended resource: max(sum of containers, largest init container)."""
    main = sum(_container_amount(c, resource) for c in pod_spec.get("containers") or [])
    init = max((_container_amount(c, resource) for c in pod_spec.get("initContainers") or []), default=0)
    return max(main, init)


def allocatable(node: Mapping[str, Any], resource: str, default: int = 0) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default


# --- writes ----------------------------------------------------------------------------------------------


def writable(obj: KubeObject) -> KubeObject:
    """A private deep copy of a cached (shared) object, ready to change and write back."""
    return copy.deepcopy(obj)


def try_update(store: ObjectStore, resource: str, obj: KubeObject) -> KubeObject | None:
    """Write ``obj`` back; a conflict or a vanished object is left to the next (level-triggered) reconcile."""
    try:
        return store.update(resource, obj)
    except (Conflict, KeyError):
        log.debug("controller write skipped", resource=resource, name=name_of(obj))
        return None


def graceful_delete(store: ObjectStore, resource: str, obj: Mapping[str, Any], grace_seconds: int) -> None:
    """Delete as the API server does for a DELETE with a grace period: set ``deletionTimestamp`` and leave
    the removal to the kubelet. Stores without graceful deletion remove the object at once."""
    mark_deleting = getattr(store, "mark_deleting", None)
    try:
        if mark_deleting is not None:
            mark_deleting(resource, namespace_of(obj) or None, name_of(obj), grace_seconds)
        else:
            store.delete(resource, namespace_of(obj) or None, name_of(obj))
    except KeyError:
        log.debug("object already gone", resource=resource, name=name_of(obj))


def termination_grace(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_SECONDS if value is None else int(value)
