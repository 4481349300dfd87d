"""The emulated API server's object store: thread-safe, one global resourceVersion, a bounded history.

It keeps the bookkeeping the API server keeps for every object (see "API Concepts" → "Resource
versions", https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions, and "Object
Names and IDs", https://kubernetes.io/docs/concepts/overview/working-with-objects/names/):

- one cluster-wide, monotonically increasing ``resourceVersion`` bumped by every write (a string on the
  wire, opaque to clients);
- ``metadata.uid``, ``creationTimestamp``, ``generateName`` and ``generation`` (bumped when anything but
  metadata and status changes, for the types that track it);
- namespaced objects only in namespaces that exist and are not terminating;
- objects with ``deletionTimestamp`` set stay until their finalizers are gone (and, for graceful pod
  deletion, until the kubelet removes them with a zero grace period);
- a bounded history of change events from which watches resume; older versions answer "expired".

Stored objects are never mutated in place: each write stores a new :class:`StoredObject` whose serialized
JSON is computed once and reused by every GET, LIST and watch that sends it.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog

from core.clock import Clock, RealClock
from sim.kube.defaults import apply_create_defaults
from sim.kube.protocols import Conflict, KubeObject, WatchListener
from sim.kube.resources import ResourceRegistry, ResourceType

log = structlog.get_logger(__name__)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

# The alphabet and length apimachinery's SimpleNameGenerator uses for generateName suffixes.
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAME_SUFFIX_LENGTH = 5


class AlreadyExistsError(KeyError):
    """A create whose name is already taken."""


class ObjectNotFoundError(KeyError):
    """An update or delete of an object that does not exist."""


class NamespaceNotFoundError(KeyError):
    """A namespaced create into a namespace that does not exist."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


class NamespaceTerminatingError(Exception):
    """A create into a namespace that is being deleted (HTTP 403 Forbidden on the wire)."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.namespace = namespace


class HistoryExpiredError(Exception):
    """A watch asked for changes older than the store's bounded history still holds."""


def dumps(obj: Any) -> bytes:
    """Compact JSON, the byte form stored and sent on the wire."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def format_timestamp(clock: Clock) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` is serialized."""
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


class StoredObject:
    """One committed version of an object, with its JSON computed at most once."""

    __slots__ = ("_item_json", "_json", "obj", "rv")

    def __init__(self, obj: KubeObject, rv: int) -> None:
        self.obj = obj
        self.rv = rv
        self._json: bytes | None = None
        self._item_json: bytes | None = None

    def json(self) -> bytes:
        """The object as sent by GET and in watch events (with ``apiVersion`` and ``kind``)."""
        if self._json is None:
            self._json = dumps(self.obj)
        return self._json

    def item_json(self) -> bytes:
        """The object as a built-in list item: the API server omits ``apiVersion`` and ``kind`` there."""
        if self._item_json is None:
            body = {k: v for k, v in self.obj.items() if k not in ("apiVersion", "kind")}
            self._item_json = dumps(body)
        return self._item_json

    def copy(self) -> KubeObject:
        """A deep copy the caller may change freely."""
        result: KubeObject = json.loads(self.json())
        return result

    @property
    def namespace(self) -> str:
        """The object's namespace, empty for cluster-scoped objects."""
        return str(self.obj.get("metadata", {}).get("namespace") or "")

    @property
    def name(self) -> str:
        """The object's name."""
        return str(self.obj.get("metadata", {}).get("name") or "")


@dataclass(frozen=True, slots=True)
class StoreEvent:
    """One committed change; ``previous`` is the version it replaced (None for ADDED)."""

    rv: int
    type: str
    resource: str
    entry: StoredObject
    previous: StoredObject | None


EventSink = Callable[[StoreEvent], None]


@dataclass(eq=False)
class _Subscription:
    resource: str
    sink: EventSink
    # Set when the watch selects one object by ``metadata.name``: only that object's events reach it.
    name: str | None = None


@dataclass
class WatchStart:
    """What a new watcher receives atomically: the events it missed, or the current objects."""

    rv: int
    backlog: list[StoreEvent] = field(default_factory=list)
    current: list[StoredObject] = field(default_factory=list)


def _spec_part(obj: KubeObject) -> dict[str, Any]:
    """Everything but metadata and status: what a ``generation`` bump is about."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class MemoryStore:
    """The :class:`sim.kube.protocols.ObjectStore` of the emulator, plus what the HTTP layer needs."""

    def __init__(
        self, registry: ResourceRegistry | None = None, clock: Clock | None = None, history_size: int = 10_000
    ) -> None:
        self.registry = registry or ResourceRegistry.with_builtins()
        self.clock: Clock = clock or RealClock()
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], StoredObject]] = {}
        self._history: deque[StoreEvent] = deque()
        self._history_size = history_size
        # Watches may resume from any version >= this one: every later event is still in the history.
        self._history_floor = 0
        self._listeners: list[WatchListener] = []
        # Watches indexed by resource, then by the one name they select (None: every name), so that a
        # write reaches only the watches that can match it, not every watch of a thousand-node fleet.
        self._subscriptions: dict[str, dict[str | None, list[_Subscription]]] = {}

    # --- reads -------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The resourceVersion of the latest write."""
        with self._lock:
            return self._rv

    def get_entry(self, resource: str, namespace: str | None, name: str) -> StoredObject | None:
        """The committed version of one object (shared, read-only), or None."""
        with self._lock:
            return self._objects.get(resource, {}).get((namespace or "", name))

    def snapshot(self, resource: str, namespace: str | None = None) -> tuple[int, list[StoredObject]]:
        """The current resourceVersion and the objects of a resource, ordered by namespace and name."""
        with self._lock:
            bucket = self._objects.get(resource, {})
            keys = sorted(k for k in bucket if k[0] == namespace) if namespace else sorted(bucket)
            return self._rv, [bucket[k] for k in keys]

    def get(self, resource: str, namespace: str | None, name: str) -> KubeObject | None:
        """A deep copy of the object, or None when it does not exist."""
        entry = self.get_entry(resource, namespace, name)
        return entry.copy() if entry is not None else None

    def list(self, resource: str, namespace: str | None = None) -> list[KubeObject]:
        """Deep copies of every object of the resource (in one namespace, or all when None)."""
        _, entries = self.snapshot(resource, namespace)
        return [entry.copy() for entry in entries]

    # --- writes ------------------------------------------------------------------------------------

    def create(self, resource: str, obj: KubeObject) -> KubeObject:
        """Store a new object, filling uid, creationTimestamp, generation and resourceVersion.

        Raises :class:`AlreadyExistsError` (a ``KeyError``) when the name is taken and
        :class:`NamespaceNotFoundError` when a namespaced object names a missing namespace.
        """
        return self.create_entry(resource, obj).copy()

    def create_entry(self, resource: str, obj: KubeObject, *, reset_status: bool = False) -> StoredObject:
        """:meth:`create`, answering the committed (shared, read-only) version.

        The server's defaults are applied (see :mod:`sim.kube.defaults`); ``reset_status`` replaces the
        given status by the initial one, as a create through the API does for types with a status
        subresource.
        """
        resource_type = self.registry.by_key(resource)
        with self._lock:
            body = self._prepare_create(resource_type, obj)
            body = apply_create_defaults(resource, body, reset_status=reset_status)
            key = (body["metadata"].get("namespace", ""), body["metadata"]["name"])
            bucket = self._objects.setdefault(resource, {})
            if key in bucket:
                raise AlreadyExistsError(key[1])
            return self._commit(resource, key, body, previous=None, event_type=ADDED)

    def update(self, resource: str, obj: KubeObject) -> KubeObject:
        """Replace the object whole; a stale ``metadata.resourceVersion`` raises ``Conflict``.

        Raises :class:`ObjectNotFoundError` (a ``KeyError``) when the object does not exist. An object
        marked for deletion whose finalizers are all gone (and whose grace period is zero) is removed.
        """
        entry = self.update_entry(resource, obj)
        return entry.copy()

    def update_entry(self, resource: str, obj: KubeObject) -> StoredObject:
        """:meth:`update`, answering the committed (shared, read-only) version."""
        resource_type = self.registry.by_key(resource)
        metadata = obj.get("metadata") or {}
        key = (
            str(metadata.get("namespace") or "") if resource_type.namespaced else "",
            str(metadata.get("name")),
        )
        with self._lock:
            previous = self._objects.get(resource, {}).get(key)
            if previous is None:
                raise ObjectNotFoundError(key[1])
            expected = metadata.get("resourceVersion")
            if expected and str(expected) != str(previous.rv):
                raise Conflict(
                    f"{resource} {key[1]}: resourceVersion {expected} is stale (now {previous.rv})"
                )
            body = self._prepare_update(resource_type, previous.obj, obj)
            if self._finalized(body):
                return self._remove(resource, key, previous)
            if body == previous.obj:
                # The API server skips writes that change nothing: no new resourceVersion, no event.
                return previous
            return self._commit(resource, key, body, previous=previous, event_type=MODIFIED)

    def delete(self, resource: str, namespace: str | None, name: str) -> KubeObject | None:
        """Remove the object at once; returns its last version (with the deletion's resourceVersion)."""
        entry = self.delete_entry(resource, namespace, name)
        return entry.copy() if entry is not None else None

    def delete_entry(self, resource: str, namespace: str | None, name: str) -> StoredObject | None:
        """:meth:`delete`, answering the removed version, or None when there was nothing to remove."""
        resource_type = self.registry.by_key(resource)
        key = (namespace or "" if resource_type.namespaced else "", name)
        with self._lock:
            previous = self._objects.get(resource, {}).get(key)
            if previous is None:
                return None
            return self._remove(resource, key, previous)

    # --- listeners and watches ---------------------------------------------------------------------

    def add_listener(self, listener: WatchListener) -> None:
        """Be told of every change after it is committed, as ``listener(type, resource, copy)``."""
        with self._lock:
            self._listeners.append(listener)

    def subscribe(
        self, resource: str, sink: EventSink, since_rv: int | None, *, name: str | None = None
    ) -> tuple[WatchStart, Callable[[], None]]:
        """Start receiving the resource's events; atomically get what precedes them.

        With ``since_rv`` set, the start holds every event after that version (raises
        :class:`HistoryExpiredError` when some have been dropped from the history); with None, it holds
        the current objects instead. Returns the start and a function that ends the subscription. The
        sink runs on the writer's thread while the store's lock is held: it must only enqueue. With
        ``name`` set, the sink receives only the events of objects of that name (the start is unfiltered).
        """
        subscription = _Subscription(resource, sink, name)
        with self._lock:
            if since_rv is None:
                start = WatchStart(self._rv, current=self.snapshot(resource)[1])
            else:
                if since_rv < self._history_floor:
                    raise HistoryExpiredError(f"too old resource version: {since_rv} ({self._history_floor})")
                backlog = [e for e in self._history if e.rv > since_rv and e.resource == resource]
                start = WatchStart(self._rv, backlog=backlog)
            self._subscriptions.setdefault(resource, {}).setdefault(name, []).append(subscription)

        def cancel() -> None:
            with self._lock:
                by_name = self._subscriptions.get(resource, {})
                sessions = by_name.get(name, [])
                if subscription in sessions:
                    sessions.remove(subscription)
                if not sessions:
                    by_name.pop(name, None)

        return start, cancel

    # --- internals ---------------------------------------------------------------------------------

    def _prepare_create(self, resource_type: ResourceType, obj: KubeObject) -> KubeObject:
        metadata = dict(obj.get("metadata") or {})
        if not metadata.get("name"):
            prefix = metadata.get("generateName")
            if not prefix:
                raise ValueError("name or generateName is required")
            metadata["name"] = self._generate_name(resource_type, str(prefix), metadata.get("namespace"))
        if resource_type.namespaced:
            namespace = str(metadata.get("namespace") or "default")
            metadata["namespace"] = namespace
            self._require_namespace(namespace)
        else:
            metadata.pop("namespace", None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = format_timestamp(self.clock)
        if resource_type.tracks_generation:
            metadata["generation"] = 1
        else:
            metadata.pop("generation", None)
        return self._normalized(resource_type, obj, metadata)

    def _prepare_update(self, resource_type: ResourceType, old: KubeObject, new: KubeObject) -> KubeObject:
        old_meta = old["metadata"]
        metadata = dict(new.get("metadata") or {})
        # Identity and creation facts are the server's; a writer cannot change them.
        for fixed in ("name", "namespace", "uid", "creationTimestamp"):
            if fixed in old_meta:
                metadata[fixed] = old_meta[fixed]
            else:
                metadata.pop(fixed, None)
        # deletionTimestamp can be set only by a delete and never cleared by a writer.
        for deletion_field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if deletion_field in old_meta:
                metadata[deletion_field] = old_meta[deletion_field]
            else:
                metadata.pop(deletion_field, None)
        if resource_type.tracks_generation:
            generation = int(old_meta.get("generation", 1))
            if _spec_part(old) != _spec_part(new):
                generation += 1
            metadata["generation"] = generation
        metadata["resourceVersion"] = old_meta["resourceVersion"]
        return self._normalized(resource_type, new, metadata)

    @staticmethod
    def _normalized(resource_type: ResourceType, obj: KubeObject, metadata: dict[str, Any]) -> KubeObject:
        # apiVersion and kind go first: list bodies are built from each object's cached bytes.
        body: KubeObject = {"apiVersion": resource_type.api_version, "kind": resource_type.kind}
        body["metadata"] = metadata
        for key, value in obj.items():
            if key not in ("apiVersion", "kind", "metadata"):
                body[key] = value
        return body

    def mark_deleting(
        self, resource: str, namespace: str | None, name: str, grace_seconds: int
    ) -> StoredObject:
        """Set ``deletionTimestamp`` (now + grace) and ``deletionGracePeriodSeconds`` on an object.

        The object stays until its finalizers are gone and, for a graceful pod, until the kubelet deletes
        it; a second call may only shorten the grace period, as the API server allows.
        """
        resource_type = self.registry.by_key(resource)
        key = (namespace or "" if resource_type.namespaced else "", name)
        with self._lock:
            previous = self._objects.get(resource, {}).get(key)
            if previous is None:
                raise ObjectNotFoundError(name)
            old_meta = previous.obj["metadata"]
            current_grace = old_meta.get("deletionGracePeriodSeconds")
            if current_grace is not None and grace_seconds >= int(current_grace):
                return previous
            deadline = self.clock.now() + timedelta(seconds=grace_seconds)
            metadata = dict(old_meta)
            metadata["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
            metadata["deletionGracePeriodSeconds"] = grace_seconds
            if resource_type.tracks_generation:
                metadata["generation"] = int(metadata.get("generation", 1)) + 1
            body = {**previous.obj, "metadata": metadata}
            if self._finalized(body):
                return self._remove(resource, key, previous)
            return self._commit(resource, key, body, previous=previous, event_type=MODIFIED)

    @staticmethod
    def _finalized(body: KubeObject) -> bool:
        metadata = body["metadata"]
        return (
            "deletionTimestamp" in metadata
            and not metadata.get("finalizers")
            and int(metadata.get("deletionGracePeriodSeconds") or 0) == 0
        )

    def _require_namespace(self, namespace: str) -> None:
        entry = self._objects.get("namespaces", {}).get(("", namespace))
        if entry is None:
            raise NamespaceNotFoundError(namespace)
        if "deletionTimestamp" in entry.obj["metadata"]:
            raise NamespaceTerminatingError(namespace)

    def _generate_name(self, resource_type: ResourceType, prefix: str, namespace: Any) -> str:
        bucket = self._objects.get(resource_type.key, {})
        ns = str(namespace or "") if resource_type.namespaced else ""
        while True:
            suffix = "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(_NAME_SUFFIX_LENGTH))
            if (ns, prefix + suffix) not in bucket:
                return prefix + suffix

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _commit(
        self,
        resource: str,
        key: tuple[str, str],
        body: KubeObject,
        *,
        previous: StoredObject | None,
        event_type: str,
    ) -> StoredObject:
        rv = self._next_rv()
        body["metadata"]["resourceVersion"] = str(rv)
        entry = StoredObject(body, rv)
        self._objects.setdefault(resource, {})[key] = entry
        self._record(StoreEvent(rv, event_type, resource, entry, previous))
        return entry

    def _remove(self, resource: str, key: tuple[str, str], previous: StoredObject) -> StoredObject:
        rv = self._next_rv()
        # A DELETED event carries the object at the resourceVersion of its deletion.
        body = {**previous.obj, "metadata": {**previous.obj["metadata"], "resourceVersion": str(rv)}}
        entry = StoredObject(body, rv)
        del self._objects[resource][key]
        self._record(StoreEvent(rv, DELETED, resource, entry, previous))
        return entry

    def _record(self, event: StoreEvent) -> None:
        if len(self._history) >= self._history_size:
            dropped = self._history.popleft()
            self._history_floor = dropped.rv
        self._history.append(event)
        by_name = self._subscriptions.get(event.resource)
        if by_name:
            # An object's name never changes, so the entry's name is also the previous version's.
            name = event.entry.obj["metadata"].get("name")
            for subscription in [*by_name.get(None, ()), *by_name.get(name, ())]:
                subscription.sink(event)
        self._notify_listeners(event)

    def _notify_listeners(self, event: StoreEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event.type, event.resource, event.entry.copy())
            except Exception:  # a broken listener must not undo a committed write
                log.exception("store listener failed", resource=event.resource)

    def clear_namespace(self, namespace: str) -> int:
        """Remove every namespaced object in ``namespace`` (the namespace controller's cleanup)."""
        removed = 0
        with self._lock:
            for resource, bucket in self._objects.items():
                for key in [k for k in bucket if k[0] == namespace]:
                    self._remove(resource, key, bucket[key])
                    removed += 1
        return removed

    def resources(self) -> Iterable[str]:
        """The store keys that currently hold objects."""
        with self._lock:
            return [r for r, bucket in self._objects.items() if bucket]
