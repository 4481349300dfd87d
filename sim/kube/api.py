"""The verbs of the emulated API server, independent of HTTP: each takes parsed input, answers a reply.

Semantics follow "API Concepts" (https://kubernetes.io/docs/reference/using-api/api-concepts/) and
"API Conventions" (community/contributors/devel/sig-architecture/api-conventions.md):

- create / get / list / replace (PUT) / patch / delete / deletecollection with the server's errors;
- optimistic concurrency: a stale ``metadata.resourceVersion`` on PUT or in a PATCH is 409 Conflict;
- the status subresource ("API Conventions" → "Spec and Status"): writes to the main resource keep the
  stored status, writes to ``/status`` change only the status;
- pagination with ``limit`` / ``continue`` over a consistent snapshot ("Retrieving large results sets in
  chunks"); an expired token is 410;
- graceful pod deletion ("Termination of Pods",
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination) and finalizers
  ("Finalizers", https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/);
- the Eviction API ("API-initiated Eviction",
  https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/) and pod binding.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
import yaml

from sim.kube import errors
from sim.kube.conversion import from_stored, to_stored
from sim.kube.defaults import omit_empty
from sim.kube.disruption import (
    EvictionDecision,
    disruption_target_condition,
    eviction_decision,
    matching_pdbs,
)
from sim.kube.errors import ApiError
from sim.kube.patch import PatchError, json_merge_patch, json_patch, strategic_merge, supports_strategic_merge
from sim.kube.protocols import Conflict, KubeObject
from sim.kube.resources import ResourceType, group_version
from sim.kube.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from sim.kube.store import (
    AlreadyExistsError,
    MemoryStore,
    NamespaceNotFoundError,
    NamespaceTerminatingError,
    ObjectNotFoundError,
    StoredObject,
    dumps,
    format_timestamp,
)
from sim.kube.validation import (
    validate_core_event_create,
    validate_job_update,
    validate_metadata,
    validate_name,
    validate_node,
    validate_pod_create,
    validate_pod_update,
)
from sim.kube.watch import render_object, view_of

log = structlog.get_logger(__name__)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_SERVER_MANAGED_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
)
_UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
_DEFAULT_POD_GRACE_S = 30
_SNAPSHOTS_KEPT = 32
_PATCH_RETRIES = 5
_RETURNS_DELETED_OBJECT = frozenset({"pods", "services"})


@dataclass(frozen=True)
class Target:
    """The object (or collection) a request addresses."""

    resource_type: ResourceType
    version: str
    namespace: str | None
    name: str | None = None
    subresource: str | None = None

    @property
    def key(self) -> str:
        """The resource's name for API rules (selectors, patch strategies): ``pods``, ``jobs.batch``."""
        return self.resource_type.key

    @property
    def store_key(self) -> str:
        """Where the resource's objects live in the store."""
        return self.resource_type.store_key


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status code, JSON body, extra headers."""

    code: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ListQuery:
    """The list parameters of a GET on a collection."""

    label_selector: LabelSelector
    field_selector: FieldSelector
    limit: int = 0
    continue_token: str = ""


def parse_selectors(target: Target, label_text: str, field_text: str) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors of a list or watch; a malformed one is 400 BadRequest."""
    try:
        return parse_label_selector(label_text), parse_field_selector(field_text, target.key)
    except SelectorError as error:
        raise errors.bad_request(str(error)) from None


def parse_json_body(raw: bytes) -> Any:
    """The request body as JSON; malformed JSON is 400 BadRequest, as the server's decoder answers."""
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise errors.bad_request(f"error decoding request body: {error}") from None


def _require_object(body: Any) -> KubeObject:
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def _causes_error(target: Target, name: str, causes: list[dict[str, str]]) -> ApiError:
    return errors.invalid(target.resource_type.kind, target.resource_type.group, name, causes)


def _encode_continue(rv: int, last_key: tuple[str, str]) -> str:
    start = "/".join(part for part in last_key if part) + "\x00"
    token = {"v": "meta.k8s.io/v1", "rv": rv, "start": start}
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise errors.bad_request(f"continue key is not valid: {token}") from None


def _entry_sort_key(entry: StoredObject) -> str:
    return "/".join(part for part in (entry.namespace, entry.name) if part) + "\x00"


class KubeApi:
    """The API server's verbs over a :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, *, server_removes_pods: Callable[[], bool] = lambda: True) -> None:
        """``server_removes_pods`` says whether no kubelet is running, so that the server itself removes a
        gracefully deleted pod once its grace period has passed on the store's clock."""
        self.store = store
        self._server_removes_pods = server_removes_pods
        self._snapshots: OrderedDict[tuple[str, str, int], list[StoredObject]] = OrderedDict()
        self._snapshot_lock = threading.Lock()
        self._eviction_lock = threading.Lock()

    # --- reads -------------------------------------------------------------------------------------

    def get(self, target: Target) -> Reply:
        """GET one object (or its status subresource, which reads the same object)."""
        entry = self._existing(target)
        return Reply(200, render_object(entry, target.resource_type, target.version))

    def list_collection(self, target: Target, query: ListQuery) -> Reply:
        """GET a collection, filtered by selectors, paged by ``limit`` / ``continue``."""
        resource_type = target.resource_type
        if query.continue_token:
            rv, start = _decode_continue(query.continue_token)
            entries = self._snapshot_for(target, rv)
            entries = [e for e in entries if _entry_sort_key(e) > start]
        else:
            rv, entries = self.store.snapshot(target.store_key, target.namespace)
        selecting = not (query.label_selector.empty and query.field_selector.empty)
        selected = [e for e in entries if self._selected(e, query, target)] if selecting else entries
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if query.limit and len(selected) > query.limit:
            page = selected[: query.limit]
            if not query.continue_token:
                self._remember_snapshot(target, rv, entries)
            metadata["continue"] = _encode_continue(rv, (page[-1].namespace, page[-1].name))
            if not selecting:
                metadata["remainingItemCount"] = len(selected) - len(page)
            selected = page
        items = (_list_item(e, target) for e in selected)
        head = {
            "kind": resource_type.list_kind,
            "apiVersion": group_version(resource_type.group, target.version),
        }
        body = dumps(head)[:-1] + b',"metadata":' + dumps(metadata) + b',"items":[' + b",".join(items) + b"]}"
        return Reply(200, body)

    @staticmethod
    def _selected(entry: StoredObject, query: ListQuery, target: Target) -> bool:
        obj = view_of(entry, target.resource_type, target.version)
        labels = obj.get("metadata", {}).get("labels") or {}
        return query.label_selector.matches(labels) and query.field_selector.matches(obj)

    def _remember_snapshot(self, target: Target, rv: int, entries: list[StoredObject]) -> None:
        with self._snapshot_lock:
            self._snapshots[(target.key, target.namespace or "", rv)] = entries
            while len(self._snapshots) > _SNAPSHOTS_KEPT:
                self._snapshots.popitem(last=False)

    def _snapshot_for(self, target: Target, rv: int) -> list[StoredObject]:
        with self._snapshot_lock:
            entries = self._snapshots.get((target.key, target.namespace or "", rv))
        if entries is None:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start "
                "a new list without the continue parameter."
            )
        return entries

    # --- create and replace ------------------------------------------------------------------------

    def create(self, target: Target, body: Any) -> Reply:
        """POST a new object to a collection."""
        obj = self._checked_body(target, body)
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise errors.bad_request("metadata must be a JSON object")
        if metadata.get("resourceVersion"):
            # The storage layer refuses this before anything else: a 500 whose Status has no reason.
            raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
        for server_field in _SERVER_MANAGED_METADATA:
            metadata.pop(server_field, None)
        name = str(metadata.get("name") or "")
        if not name and not metadata.get("generateName"):
            raise _causes_error(
                target,
                "",
                [
                    errors.field_error(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )
                ],
            )
        omit_empty(target.key, obj)
        causes = validate_name(name, label=target.key == "namespaces") if name else []
        causes += validate_metadata(metadata) + self._kind_causes(target, None, obj)
        if causes:
            raise _causes_error(target, name, causes)
        resource_type = target.resource_type
        reset_status = resource_type.has_status and not resource_type.keeps_status_on_create
        try:
            entry = self.store.create_entry(
                target.store_key, to_stored(resource_type, obj), reset_status=reset_status
            )
        except AlreadyExistsError:
            raise errors.already_exists(resource_type.plural, resource_type.group, name) from None
        except NamespaceNotFoundError as error:
            raise errors.not_found("namespaces", "", error.namespace) from None
        except NamespaceTerminatingError as error:
            message = (
                f'{errors.qualified(resource_type.plural, resource_type.group)} "{name}" is forbidden: '
                "unable to "
                f"create new content in namespace {error.namespace} because it is being terminated"
            )
            raise ApiError(403, "Forbidden", message) from None
        return Reply(201, render_object(entry, resource_type, target.version))

    def replace(self, target: Target, body: Any) -> Reply:
        """PUT the whole object (or, on ``/status``, its status)."""
        obj = self._checked_body(target, body)
        metadata = obj.setdefault("metadata", {})
        body_name = metadata.get("name")
        if body_name != target.name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({target.name})"
            )
        current = self.store.get_entry(target.store_key, target.namespace, str(target.name))
        if current is None:
            if target.resource_type.create_on_update and not target.subresource:
                return self.create(target, obj)
            raise self._not_found(target)
        requested_rv = str(metadata.get("resourceVersion") or "")
        stored = to_stored(target.resource_type, obj)
        return self._write(target, lambda _old: stored, requested_rv)

    def patch(self, target: Target, raw: bytes, content_type: str, field_manager: str | None) -> Reply:
        """PATCH with one of the four patch types (apply patches: a simplified server-side apply)."""
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type == APPLY_PATCH:
            return self._apply(target, raw, field_manager)
        if media_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH) or (
            media_type == STRATEGIC_MERGE_PATCH and not supports_strategic_merge(target.key)
        ):
            raise self._unsupported_patch(target, content_type)
        document = parse_json_body(raw)
        self._existing(target)

        def patched(old: KubeObject) -> KubeObject:
            view = from_stored(target.resource_type, old, target.version)
            try:
                if media_type == JSON_PATCH:
                    result = json_patch(view, document)
                elif media_type == MERGE_PATCH:
                    result = json_merge_patch(view, document)
                else:
                    result = strategic_merge(target.key, view, document)
            except PatchError as error:
                raise ApiError(error.status_code, _patch_reason(error.status_code), str(error)) from None
            return to_stored(target.resource_type, result)

        return self._write(target, patched, requested_rv=None)

    def _unsupported_patch(self, target: Target, content_type: str) -> ApiError:
        accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
        if supports_strategic_merge(target.key):
            accepted.insert(2, STRATEGIC_MERGE_PATCH)
        message = (
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(accepted)
        )
        return ApiError(415, "UnsupportedMediaType", message)

    def _apply(self, target: Target, raw: bytes, field_manager: str | None) -> Reply:
        """Server-side apply, simplified: create when missing, else merge the applied configuration.

        Field ownership and apply conflicts are not emulated; the required ``fieldManager`` is checked.
        """
        if not field_manager:
            message = (
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch"
            )
            cause = errors.field_error(
                "FieldValueRequired", "fieldManager", "Required value: is required for apply patch"
            )
            details = {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [cause]}
            raise ApiError(422, "Invalid", message, details=details)
        try:
            document = yaml.safe_load(raw.decode() or "null")
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise errors.bad_request(f"error decoding YAML: {error}") from None
        obj = _require_object(document)
        if self.store.get_entry(target.store_key, target.namespace, str(target.name)) is None:
            if target.subresource:
                raise self._not_found(target)
            obj.setdefault("metadata", {})["name"] = target.name
            if target.namespace:
                obj["metadata"].setdefault("namespace", target.namespace)
            return self.create(target, obj)

        def applied(old: KubeObject) -> KubeObject:
            view = from_stored(target.resource_type, old, target.version)
            try:
                if supports_strategic_merge(target.key):
                    return to_stored(target.resource_type, strategic_merge(target.key, view, obj))
                return to_stored(target.resource_type, json_merge_patch(view, obj))
            except PatchError as error:
                raise ApiError(error.status_code, _patch_reason(error.status_code), str(error)) from None

        return self._write(target, applied, requested_rv=None)

    def _write(
        self, target: Target, change: Callable[[KubeObject], KubeObject], requested_rv: str | None
    ) -> Reply:
        """Read, change, validate and store, retrying when another writer got in between.

        ``requested_rv``: the version the client's PUT named (empty for an unconditional PUT); None for a
        patch, whose precondition is whatever ``metadata.resourceVersion`` the patched object carries.
        """
        resource_type = target.resource_type
        for _ in range(_PATCH_RETRIES):
            current = self._existing(target)
            old = current.copy()
            new = change(old if requested_rv is not None else current.copy())
            new = _require_object(new)
            new_meta = new.get("metadata")
            if not isinstance(new_meta, dict):
                raise errors.bad_request("metadata must be a JSON object")
            precondition = (
                requested_rv if requested_rv is not None else str(new_meta.get("resourceVersion") or "")
            )
            if precondition and precondition != str(current.rv):
                raise errors.conflict(
                    resource_type.plural, resource_type.group, str(target.name), errors.STALE_OBJECT
                )
            if new_meta.get("name", target.name) != target.name:
                raise _causes_error(
                    target,
                    str(target.name),
                    [
                        errors.field_error(
                            "FieldValueInvalid", "metadata.name", "Invalid value: field is immutable"
                        )
                    ],
                )
            merged = self._merge_for_subresource(target, old, new)
            omit_empty(target.key, merged)
            merged["metadata"]["resourceVersion"] = str(current.rv)
            causes = validate_metadata(merged["metadata"]) + self._kind_causes(target, old, merged)
            if causes:
                raise _causes_error(target, str(target.name), causes)
            try:
                entry = self.store.update_entry(target.store_key, merged)
            except Conflict:
                if precondition:
                    raise errors.conflict(
                        resource_type.plural, resource_type.group, str(target.name), errors.STALE_OBJECT
                    ) from None
                continue
            except ObjectNotFoundError:
                raise self._not_found(target) from None
            return Reply(200, render_object(entry, resource_type, target.version))
        raise errors.conflict(
            resource_type.plural, resource_type.group, str(target.name), errors.STALE_OBJECT
        )

    @staticmethod
    def _merge_for_subresource(target: Target, old: KubeObject, new: KubeObject) -> KubeObject:
        """Main resource writes keep the stored status; ``/status`` writes change only the status."""
        if target.subresource == "status":
            merged = dict(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            merged["metadata"] = dict(old["metadata"])
            return merged
        merged = dict(new)
        merged["metadata"] = dict(new["metadata"])
        if target.resource_type.has_status:
            if "status" in old:
                merged["status"] = old["status"]
            else:
                merged.pop("status", None)
        return merged

    def _kind_causes(self, target: Target, old: KubeObject | None, new: KubeObject) -> list[dict[str, str]]:
        if target.key == "nodes":
            return validate_node(new)
        if target.key == "jobs.batch" and old is not None and target.subresource != "status":
            return validate_job_update(old, new)
        if target.key == "events" and old is None and not target.resource_type.group:
            return validate_core_event_create(new, target.namespace)
        if target.key == "pods":
            if old is None:
                return validate_pod_create(new)
            if target.subresource != "status":
                return validate_pod_update(old, new)
        return []

    def _checked_body(self, target: Target, body: Any) -> KubeObject:
        obj = dict(_require_object(body))
        resource_type = target.resource_type
        kind = obj.get("kind")
        if kind and kind != resource_type.kind:
            raise errors.bad_request(
                f'{kind} in version "{target.version}" cannot be handled as a {resource_type.kind}: '
                f"the object kind does not match"
            )
        api_version = obj.get("apiVersion")
        served = {group_version(resource_type.group, v) for v in resource_type.versions}
        if api_version and api_version not in served:
            expected = group_version(resource_type.group, target.version)
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({expected})"
            )
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise errors.bad_request("metadata must be a JSON object")
        metadata = dict(metadata)
        obj["metadata"] = metadata
        if resource_type.namespaced:
            body_namespace = metadata.get("namespace")
            if body_namespace and body_namespace != target.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            metadata["namespace"] = target.namespace
        return obj

    # --- delete ------------------------------------------------------------------------------------

    def delete(self, target: Target, options: KubeObject) -> Reply:
        """DELETE one object: graceful for scheduled pods, held by finalizers, else immediate."""
        entry = self._existing(target)
        self._check_preconditions(target, entry, options.get("preconditions") or {})
        if target.key == "namespaces":
            return self._delete_namespace(target, entry)
        resource_type = target.resource_type
        if target.key == "pods":
            result = self._delete_pod(entry, options.get("gracePeriodSeconds"))
        elif entry.obj["metadata"].get("finalizers"):
            result = self.store.mark_deleting(target.store_key, target.namespace, str(target.name), 0)
        else:
            result = self.store.delete_entry(target.store_key, target.namespace, str(target.name)) or entry
        still_there = self.store.get_entry(target.store_key, target.namespace, str(target.name)) is not None
        if still_there or target.key in _RETURNS_DELETED_OBJECT or resource_type.custom:
            return Reply(200, render_object(result, resource_type, target.version))
        details = {
            "name": target.name,
            "group": resource_type.group,
            "kind": resource_type.plural,
            "uid": entry.obj["metadata"].get("uid"),
        }
        return Reply(200, dumps(errors.success_status(200, details)))

    def delete_collection(self, target: Target, query: ListQuery, options: KubeObject) -> Reply:
        """DELETE on a collection: every selected object, each as a single delete would."""
        _, entries = self.store.snapshot(target.store_key, target.namespace)
        deleted: list[bytes] = []
        for entry in entries:
            if not self._selected(entry, query, target):
                continue
            single = Target(target.resource_type, target.version, entry.namespace or None, entry.name)
            try:
                self.delete(single, options)
            except ApiError as error:
                if error.code != 404:
                    raise
                continue
            deleted.append(_list_item(entry, target))
        resource_type = target.resource_type
        head = {
            "kind": resource_type.list_kind,
            "apiVersion": group_version(resource_type.group, target.version),
        }
        metadata = {"resourceVersion": str(self.store.resource_version)}
        body = (
            dumps(head)[:-1] + b',"metadata":' + dumps(metadata) + b',"items":[' + b",".join(deleted) + b"]}"
        )
        return Reply(200, body)

    def _check_preconditions(self, target: Target, entry: StoredObject, preconditions: KubeObject) -> None:
        resource_type = target.resource_type
        uid = preconditions.get("uid")
        actual_uid = entry.obj["metadata"].get("uid")
        if uid and uid != actual_uid:
            detail = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual_uid}"
            raise errors.conflict(resource_type.plural, resource_type.group, str(target.name), detail)
        rv = preconditions.get("resourceVersion")
        if rv and str(rv) != str(entry.rv):
            detail = (
                f"Precondition failed: ResourceVersion in precondition: {rv}, "
                f"ResourceVersion in object meta: {entry.rv}"
            )
            raise errors.conflict(resource_type.plural, resource_type.group, str(target.name), detail)

    def _delete_pod(self, entry: StoredObject, requested_grace: Any) -> StoredObject:
        pod = entry.obj
        spec = pod.get("spec") or {}
        grace = int(
            requested_grace
            if requested_grace is not None
            else spec.get("terminationGracePeriodSeconds", _DEFAULT_POD_GRACE_S)
        )
        phase = (pod.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            # Pods that never ran, or have finished, have no containers to stop: they go at once.
            grace = 0
        grace = max(grace, 0)
        result = self.store.mark_deleting("pods", entry.namespace, entry.name, grace)
        if grace > 0 and self._server_removes_pods():
            uid = pod["metadata"].get("uid")
            self.store.clock.call_later(
                grace, lambda: self._remove_terminated_pod(entry.namespace, entry.name, uid)
            )
        return result

    def _remove_terminated_pod(self, namespace: str, name: str, uid: Any) -> None:
        """What the kubelet does at the end of a grace period: delete with a zero grace period."""
        entry = self.store.get_entry("pods", namespace, name)
        if entry is None or entry.obj["metadata"].get("uid") != uid:
            return
        try:
            self.store.mark_deleting("pods", namespace, name, 0)
        except ObjectNotFoundError:
            return

    def _delete_namespace(self, target: Target, entry: StoredObject) -> Reply:
        name = str(target.name)
        if name in _UNDELETABLE_NAMESPACES:
            raise ApiError(
                403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted'
            )
        terminating = self.store.mark_deleting("namespaces", None, name, 0)
        body = {**terminating.obj, "status": {"phase": "Terminating"}}
        # The namespace controller's work, done at once: remove the contents, then the namespace.
        self.store.clear_namespace(name)
        self.store.delete_entry("namespaces", None, name)
        return Reply(200, dumps(body))

    # --- subresources ------------------------------------------------------------------------------

    def evict(self, target: Target, body: Any) -> Reply:
        """POST ``pods/{name}/eviction``: delete the pod unless a PodDisruptionBudget forbids it."""
        eviction = _require_object(body)
        eviction_name = (eviction.get("metadata") or {}).get("name")
        if eviction_name and eviction_name != target.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        with self._eviction_lock:
            entry = self._existing(
                Target(target.resource_type, target.version, target.namespace, target.name)
            )
            pod = entry.copy()
            pdbs = matching_pdbs(pod, self.store.list("poddisruptionbudgets.policy", target.namespace))
            # The namespace's pods matter only to a budget that covers this pod; copying thousands of them
            # for every eviction would make the emulator, not the client, the drain's bottleneck.
            pods = self.store.list("pods", target.namespace) if pdbs else []
            decision = eviction_decision(pod, pdbs, pods)
            if not decision.allowed:
                raise _refusal(decision)
            self._check_preconditions(target, entry, options.get("preconditions") or {})
            if not pod["metadata"].get("deletionTimestamp"):
                entry = self._mark_disruption_target(entry)
            self._delete_pod(entry, options.get("gracePeriodSeconds"))
        return Reply(201, dumps(errors.success_status(201)))

    def _mark_disruption_target(self, entry: StoredObject) -> StoredObject:
        pod = entry.copy()
        condition = disruption_target_condition(
            "EvictionByEvictionAPI", "Eviction API: evicting", format_timestamp(self.store.clock)
        )
        status = pod.setdefault("status", {})
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"
        ]
        status["conditions"].append(condition)
        return self.store.update_entry("pods", pod)

    def bind(self, target: Target, body: Any) -> Reply:
        """POST ``pods/{name}/binding``: set ``spec.nodeName`` once, as the scheduler does."""
        binding = _require_object(body)
        node = (binding.get("target") or {}).get("name")
        if not node:
            raise _causes_error(
                target,
                str(target.name),
                [errors.field_error("FieldValueRequired", "target.name", "Required value")],
            )
        for _ in range(_PATCH_RETRIES):
            entry = self._existing(target)
            pod = entry.copy()
            if pod["metadata"].get("deletionTimestamp"):
                raise errors.conflict(
                    "pods", "", str(target.name), "pod is being deleted, cannot be assigned to a host"
                )
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise errors.conflict(
                    "pods", "", str(target.name), f'pod {target.name} is already assigned to node "{current}"'
                )
            pod.setdefault("spec", {})["nodeName"] = node
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": format_timestamp(self.store.clock),
                }
            )
            status["conditions"] = conditions
            try:
                self.store.update_entry("pods", pod)
            except Conflict:
                continue
            return Reply(201, dumps(errors.success_status(201)))
        raise errors.conflict("pods", "", str(target.name), errors.STALE_OBJECT)

    # --- helpers -----------------------------------------------------------------------------------

    def _existing(self, target: Target) -> StoredObject:
        entry = self.store.get_entry(target.store_key, target.namespace, str(target.name))
        if entry is None:
            raise self._not_found(target)
        return entry

    @staticmethod
    def _not_found(target: Target) -> ApiError:
        return errors.not_found(target.resource_type.plural, target.resource_type.group, str(target.name))


def _list_item(entry: StoredObject, target: Target) -> bytes:
    """One list item's JSON: built-in items omit ``apiVersion``/``kind``, as on the wire."""
    resource_type = target.resource_type
    if target.version == resource_type.version and not resource_type.stored_as:
        return entry.item_json() if resource_type.strips_list_item_type else entry.json()
    view = view_of(entry, resource_type, target.version)
    if resource_type.strips_list_item_type:
        view = {k: v for k, v in view.items() if k not in ("apiVersion", "kind")}
    return dumps(view)


def _patch_reason(code: int) -> str:
    return {400: "BadRequest", 415: "UnsupportedMediaType", 409: "Conflict"}.get(code, "Invalid")


def _refusal(decision: EvictionDecision) -> ApiError:
    """The ``Status`` of a refused eviction (429 with a DisruptionBudget cause, or 500)."""
    details: dict[str, Any] = {}
    if decision.cause_type:
        details["causes"] = [{"reason": decision.cause_type, "message": decision.cause_message or ""}]
    retry_after = decision.retry_after_seconds or None
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(
        decision.status_code,
        decision.reason,
        decision.message,
        details=details or None,
        retry_after=retry_after,
    )


def list_query(target: Target, params: Iterable[tuple[str, str]]) -> ListQuery:
    """The list parameters of a request's query string."""
    values = dict(params)
    label_selector, field_selector = parse_selectors(
        target, values.get("labelSelector", ""), values.get("fieldSelector", "")
    )
    try:
        limit = int(values.get("limit") or 0)
    except ValueError:
        raise errors.bad_request(f"invalid limit: {values.get('limit')}") from None
    return ListQuery(label_selector, field_selector, max(limit, 0), values.get("continue", ""))
