"""The OpenAPI v3 documents kubectl downloads before ``apply``/``create -f`` (``--validate``, the default).

kubectl validates a manifest on the server when the server's OpenAPI v3 document shows that the PATCH of the
object's kind takes the ``fieldValidation`` query parameter (cli-runtime's ``QueryParamVerifierV3``: a path
whose ``patch`` operation carries ``x-kubernetes-group-version-kind`` for that kind and a ``fieldValidation``
query parameter); only when it cannot tell does it fall back to ``/openapi/v2`` and validate on the client.
So, as kube-apiserver does ("OpenAPI V3", kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3):

- ``GET /openapi/v3``: ``{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}``,
  one entry per served group version;
- ``GET /openapi/v3/api/v1``, ``/openapi/v3/apis/<group>/<version>``: an OpenAPI 3.0 document with, for every
  served resource, its collection and item paths and their operations (verbs as discovery lists them),
  each tagged with ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind``, and the query
  parameters the emulator reads (``fieldValidation``, ``fieldManager``, ``dryRun``, ``force``, selectors,
  ``watch``, ...). The schemas of the objects are open (``type: object``): the emulator does not enforce
  field validation, so no document here claims to.

``/openapi/v2`` is not served (kubectl does not need it once v3 answers).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.kube.resources import ResourceRegistry, ResourceType, group_version

__all__ = ["openapi_v3_document", "openapi_v3_index", "openapi_v3_path"]

KUBE_VERSION = "v1.37.2"


def openapi_v3_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``: the key of a group version in the index."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _group_versions(registry: ResourceRegistry) -> list[tuple[str, str]]:
    named = [
        (group, version) for group, versions in registry.group_versions().items() for version in versions
    ]
    return [("", "v1"), *sorted(named)]


def openapi_v3_index(registry: ResourceRegistry) -> dict[str, Any]:
    """The root document: one ``serverRelativeURL`` per served group version, with a content hash."""
    paths: dict[str, Any] = {}
    for group, version in _group_versions(registry):
        document = openapi_v3_document(registry, group, version)
        assert document is not None
        digest = hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()
        key = openapi_v3_path(group, version)
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def _parameter(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": True},
    }


_FIELD_MANAGER = _parameter("fieldManager", "a name associated with the actor making the change")
_FIELD_VALIDATION = _parameter(
    "fieldValidation", "how the server treats unknown and duplicate fields: Ignore, Warn or Strict"
)
_DRY_RUN = _parameter("dryRun", "All: run every stage but storage (refused by the emulator)")
_PRETTY = _parameter("pretty", "pretty-print the output")
_WRITE = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _PRETTY]
_LIST = [
    _parameter("labelSelector", "select objects by their labels"),
    _parameter("fieldSelector", "select objects by their fields"),
    _parameter("limit", "the most objects in one answer", "integer"),
    _parameter("continue", "the token of the next chunk"),
    _parameter("resourceVersion", "the version to list or watch from"),
    _parameter("resourceVersionMatch", "how resourceVersion applies"),
    _parameter("timeoutSeconds", "end the watch after this long", "integer"),
    _parameter("watch", "stream changes", "boolean"),
    _parameter("allowWatchBookmarks", "send BOOKMARK events", "boolean"),
    _parameter("sendInitialEvents", "start a watch with the current objects", "boolean"),
    _PRETTY,
]
_DELETE = [
    _DRY_RUN,
    _parameter("gracePeriodSeconds", "seconds before the object is deleted", "integer"),
    _parameter("propagationPolicy", "Orphan, Background or Foreground"),
    _PRETTY,
]


def _schema_name(resource: ResourceType, version: str) -> str:
    group = resource.group or "core"
    return f"io.k8s.sim.{group}.{version}.{resource.kind}"


def _operation(
    resource: ResourceType,
    version: str,
    action: str,
    parameters: list[dict[str, Any]],
    *,
    patch: bool = False,
) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(resource, version)}"}
    operation: dict[str, Any] = {
        "operationId": f"{action}{resource.kind}",
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource.group,
            "version": version,
            "kind": resource.kind,
        },
    }
    if patch:
        # No requestBody: kubectl would then compute its strategic merge patch from these (open) schemas and
        # warn that it cannot; without one it uses its own built-in types, as it does for an old server.
        pass
    elif action in ("post", "put"):
        operation["requestBody"] = {"content": {"application/json": {"schema": ref}}}
    return operation


def _paths(resource: ResourceType, version: str) -> dict[str, Any]:
    base = f"/{openapi_v3_path(resource.group, version)}"
    collection = (
        f"{base}/namespaces/{{namespace}}/{resource.plural}"
        if resource.namespaced
        else f"{base}/{resource.plural}"
    )
    item = f"{collection}/{{name}}"
    verbs = set(resource.verbs)
    collection_ops: dict[str, Any] = {}
    item_ops: dict[str, Any] = {}
    if "list" in verbs:
        collection_ops["get"] = _operation(resource, version, "list", _LIST)
    if "create" in verbs:
        collection_ops["post"] = _operation(resource, version, "post", _WRITE)
    if "deletecollection" in verbs:
        collection_ops["delete"] = _operation(resource, version, "deletecollection", _DELETE + _LIST)
    if "get" in verbs:
        item_ops["get"] = _operation(resource, version, "get", [_PRETTY])
    if "update" in verbs:
        item_ops["put"] = _operation(resource, version, "put", _WRITE)
    if "patch" in verbs:
        force = _parameter("force", "take over fields another manager owns (apply)", "boolean")
        item_ops["patch"] = _operation(resource, version, "patch", [*_WRITE, force], patch=True)
    if "delete" in verbs:
        item_ops["delete"] = _operation(resource, version, "delete", _DELETE)
    paths: dict[str, Any] = {}
    if collection_ops:
        paths[collection] = collection_ops
    if item_ops:
        paths[item] = item_ops
    return paths


def openapi_v3_document(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI 3.0 document of one served group version; None when it is not served."""
    if (group, version) not in _group_versions(registry):
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource in sorted(registry.in_group_version(group, version), key=lambda r: r.plural):
        paths.update(_paths(resource, version))
        schemas[_schema_name(resource, version)] = {
            "type": "object",
            "description": f"{resource.kind} ({group_version(resource.group, version)}): open, not validated",
            "x-kubernetes-group-version-kind": [
                {"group": resource.group, "version": version, "kind": resource.kind}
            ],
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (emulated by gpuhealth sim kube)", "version": KUBE_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }
