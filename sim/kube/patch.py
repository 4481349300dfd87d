"""The three patch types of the Kubernetes API: strategic merge, JSON merge (RFC 7386), JSON patch (RFC 6902).

Strategic merge follows "Update API Objects in Place Using kubectl patch"
(https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/) and the
strategic-merge-patch design (community/contributors/devel/sig-api-machinery/strategic-merge-patch.md):
maps merge recursively, ``null`` deletes a key, and a list merges only when its Go field carries a
``patchStrategy:"merge"`` tag, by its ``patchMergeKey`` (or as a set for lists of scalars); every other
list, ``spec.taints`` and ``spec.tolerations`` among them, is atomic and replaced whole. The tags below are
copied from the Kubernetes API types of the resources the emulator serves. The server refuses strategic
merge for custom resources (415 Unsupported Media Type): see :func:`supports_strategic_merge`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from sim.kube.protocols import KubeObject

__all__ = [
    "PatchError",
    "json_merge_patch",
    "json_patch",
    "strategic_merge",
    "supports_strategic_merge",
]


class PatchError(ValueError):
    """A patch the API server refuses; ``status_code`` is 400 (malformed) or 422 (does not apply)."""

    def __init__(self, message: str, status_code: int = 422) -> None:
        super().__init__(message)
        self.status_code = status_code


# --- the patch-strategy schema of the built-in types we serve -------------------------------------------


@dataclass(frozen=True)
class _Field:
    """The strategic-merge behaviour of one field: its nested type and, for lists, the merge strategy."""

    struct: _Struct | None = None
    merge: bool = False
    merge_key: str | None = None


@dataclass(frozen=True)
class _Struct:
    fields: Mapping[str, _Field] = field(default_factory=dict)


_LEAF = _Struct()


def _merge_list(key: str | None = None, element: _Struct | None = None) -> _Field:
    return _Field(struct=element, merge=True, merge_key=key)


def _nested(struct: _Struct) -> _Field:
    return _Field(struct=struct)


_OBJECT_META = _Struct(
    {
        "ownerReferences": _merge_list("uid"),  # ObjectMeta.OwnerReferences patchMergeKey:"uid"
        "finalizers": _merge_list(),  # ObjectMeta.Finalizers patchStrategy:"merge" (a set of strings)
    }
)
_CONTAINER = _Struct(
    {
        "ports": _merge_list("containerPort"),
        "env": _merge_list("name"),
        "volumeMounts": _merge_list("mountPath"),
        "volumeDevices": _merge_list("devicePath"),
    }
)
_POD_SPEC = _Struct(
    {
        "containers": _merge_list("name", _CONTAINER),
        "initContainers": _merge_list("name", _CONTAINER),
        "ephemeralContainers": _merge_list("name", _CONTAINER),
        "volumes": _merge_list("name"),  # patchStrategy:"merge,retainKeys"
        "imagePullSecrets": _merge_list("name"),
        "hostAliases": _merge_list("ip"),
        "topologySpreadConstraints": _merge_list("topologyKey"),
        "schedulingGates": _merge_list("name"),
        "resourceClaims": _merge_list("name"),
        # tolerations, readinessGates: no patchStrategy tag -> atomic.
    }
)
_CONDITIONS = _merge_list("type")
_POD_STATUS = _Struct({"conditions": _CONDITIONS, "podIPs": _merge_list("ip"), "hostIPs": _merge_list("ip")})
_POD_TEMPLATE = _Struct({"metadata": _nested(_OBJECT_META), "spec": _nested(_POD_SPEC)})
_WITH_CONDITIONS = _Struct({"conditions": _CONDITIONS})


def _top(spec: _Struct = _LEAF, status: _Struct = _LEAF, **extra: _Field) -> _Struct:
    return _Struct(
        {"metadata": _nested(_OBJECT_META), "spec": _nested(spec), "status": _nested(status), **extra}
    )


_TEMPLATED = _top(_Struct({"template": _nested(_POD_TEMPLATE)}), _WITH_CONDITIONS)

_SCHEMAS: dict[str, _Struct] = {
    "pods": _top(_POD_SPEC, _POD_STATUS),
    "podtemplates": _top(template=_nested(_POD_TEMPLATE)),
    # NodeSpec.Taints has no patchStrategy tag: atomic. NodeSpec.PodCIDRs is patchStrategy:"merge".
    "nodes": _top(
        _Struct({"podCIDRs": _merge_list()}),
        _Struct({"conditions": _CONDITIONS, "addresses": _merge_list("type")}),
    ),
    "namespaces": _top(status=_WITH_CONDITIONS),
    "services": _top(_Struct({"ports": _merge_list("port")})),
    "replicationcontrollers": _TEMPLATED,
    "jobs.batch": _TEMPLATED,
    "cronjobs.batch": _top(
        _Struct(
            {
                "jobTemplate": _nested(
                    _Struct({"spec": _nested(_Struct({"template": _nested(_POD_TEMPLATE)}))})
                )
            }
        )
    ),
    "daemonsets.apps": _TEMPLATED,
    "deployments.apps": _TEMPLATED,
    "replicasets.apps": _TEMPLATED,
    "statefulsets.apps": _TEMPLATED,
    "poddisruptionbudgets.policy": _top(status=_WITH_CONDITIONS),
}

# API groups compiled into kube-apiserver: their types carry Go patch tags, so strategic merge works.
_BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "coordination.k8s.io",
        "events.k8s.io",
        "discovery.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "certificates.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "resource.k8s.io",
    }
)


def _base_resource(resource: str) -> str:
    return resource.split("/", 1)[0]  # "nodes/status" patches the node


def supports_strategic_merge(resource: str) -> bool:
    """False for custom resources: the server answers 415 to a strategic merge patch on them."""
    _, _, group = _base_resource(resource).partition(".")
    return group in _BUILTIN_GROUPS


# --- strategic merge -----------------------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def strategic_merge(resource: str, original: KubeObject, patch: KubeObject) -> KubeObject:
    """Apply a strategic merge patch to ``original`` (not modified) and return the patched object."""
    if not supports_strategic_merge(resource):
        raise PatchError(f"strategic merge patch is not supported for {resource}", status_code=415)
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", status_code=400)
    schema = _SCHEMAS.get(_base_resource(resource), _top())
    return _merge_map(copy.deepcopy(original), copy.deepcopy(patch), schema)


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: _Struct | None) -> dict[str, Any]:
    directive = patch.pop(_DIRECTIVE, None)
    if directive == "replace":
        return _strip_directives(patch, schema)
    if directive == "delete":
        return {}
    if directive not in (None, "merge"):
        raise PatchError(f"unknown $patch directive {directive!r} in a map")
    _apply_retain_keys(original, patch)
    orders = _pop_prefixed(patch, _SET_ORDER)
    for name, removals in _pop_prefixed(patch, _DELETE_PRIMITIVE).items():
        _delete_from_primitive_list(original, name, removals)
    for key, value in patch.items():
        if value is None:
            original.pop(key, None)
            continue
        spec = schema.fields.get(key) if schema else None
        original[key] = _merge_value(original.get(key), value, spec)
    for name, order in orders.items():
        if isinstance(original.get(name), list):
            spec = schema.fields.get(name) if schema else None
            original[name] = _apply_order(original[name], order, spec.merge_key if spec else None)
    return original


def _merge_value(original: Any, patch: Any, spec: _Field | None) -> Any:
    struct = spec.struct if spec else None
    if isinstance(patch, dict):
        base = original if isinstance(original, dict) else {}
        return _merge_map(base, patch, struct)
    if isinstance(patch, list):
        base_list = original if isinstance(original, list) else []
        if spec is not None and spec.merge:
            return _merge_list_by_strategy(base_list, patch, spec)
        return [_strip_directives(item, struct) if isinstance(item, dict) else item for item in patch]
    return patch


def _strip_directives(value: dict[str, Any], schema: _Struct | None) -> dict[str, Any]:
    """A patch value taken as is: merged into nothing so nested nulls and directives are honoured."""
    return _merge_map({}, value, schema)


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list) or not all(isinstance(key, str) for key in retained):
        raise PatchError("$retainKeys must be a list of field names")
    for key in patch:
        if not key.startswith("$") and key not in retained:
            raise PatchError(f"$retainKeys: field {key!r} is in the patch but not in the $retainKeys list")
    for key in list(original):
        if key not in retained:
            del original[key]


def _pop_prefixed(patch: dict[str, Any], prefix: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for key in [key for key in patch if key.startswith(prefix)]:
        value = patch.pop(key)
        if not isinstance(value, list):
            raise PatchError(f"{key} must be a list")
        found[key[len(prefix) :]] = value
    return found


def _delete_from_primitive_list(original: dict[str, Any], name: str, removals: list[Any]) -> None:
    current = original.get(name)
    if isinstance(current, list):
        original[name] = [item for item in current if item not in removals]


def _merge_list_by_strategy(original: list[Any], patch: list[Any], spec: _Field) -> list[Any]:
    if any(_is_directive(item, "replace") for item in patch):
        rest = [item for item in patch if not _is_directive(item, "replace")]
        return _merge_list_by_strategy([], rest, spec)
    if spec.merge_key is None:
        return _merge_scalar_set(original, patch)
    return _merge_keyed(original, patch, spec.merge_key, spec.struct)


def _is_directive(item: Any, name: str) -> bool:
    return isinstance(item, dict) and item.get(_DIRECTIVE) == name and len(item) == 1


def _merge_scalar_set(original: list[Any], patch: list[Any]) -> list[Any]:
    merged = list(original)
    for item in patch:
        if isinstance(item, dict | list):
            raise PatchError("a list of scalars with merge strategy cannot hold objects")
        if item not in merged:
            merged.append(item)
    return merged


def _merge_keyed(original: list[Any], patch: list[Any], key: str, struct: _Struct | None) -> list[Any]:
    merged = list(original)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        position = next(
            (i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(key) == item[key]), None
        )
        if item.get(_DIRECTIVE) == "delete":
            if position is not None:
                del merged[position]
            continue
        if position is None:
            merged.append(_strip_directives(item, struct))
        else:
            merged[position] = _merge_map(merged[position], item, struct)
    return merged


def _apply_order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """Honour ``$setElementOrder``: listed elements first, in that order; server-only ones after."""

    def identity(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    wanted = [entry.get(key) if key is not None and isinstance(entry, dict) else entry for entry in order]
    rank = {_hashable(value): index for index, value in enumerate(wanted)}
    listed = [item for item in items if _hashable(identity(item)) in rank]
    listed.sort(key=lambda item: rank[_hashable(identity(item))])
    return listed + [item for item in items if _hashable(identity(item)) not in rank]


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, dict | list) else value


# --- JSON merge patch and JSON patch -------------------------------------------------------------------


def json_merge_patch(original: KubeObject, patch: KubeObject) -> KubeObject:
    """RFC 7386: objects merge recursively, ``null`` removes a member, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        raise PatchError("merge patch must be a JSON object", status_code=400)
    return _rfc7386(copy.deepcopy(original), copy.deepcopy(patch))  # type: ignore[no-any-return]


def _rfc7386(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _rfc7386(result.get(key), value)
    return result


def json_patch(original: KubeObject, ops: list[dict[str, Any]]) -> KubeObject:
    """RFC 6902 operations; a malformed operation is a 400, one that does not apply (test fails) a 422."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a JSON array of operations", status_code=400)
    try:
        patched = jsonpatch.JsonPatch(ops).apply(original, in_place=False)
    except jsonpatch.InvalidJsonPatch as error:
        raise PatchError(f"invalid json patch: {error}", status_code=400) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
        raise PatchError(f"json patch does not apply: {error}") from None
    except (TypeError, KeyError, IndexError, AttributeError) as error:
        raise PatchError(f"invalid json patch: {error}", status_code=400) from None
    if not isinstance(patched, dict):
        raise PatchError("json patch must leave a JSON object")
    return patched
