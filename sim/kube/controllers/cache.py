"""An informer-like read cache shared by the controllers of one store.

Listing every node and pod on each 100 ms tick would copy the whole cluster ten times a second; like
client-go's informers, the cache lists a resource once and then follows the store's change listener.
Cached objects are shared and must be treated as read-only: copy one before changing it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sim.kube.protocols import KubeObject, ObjectStore

_Key = tuple[str, str]

_CACHES: weakref.WeakKeyDictionary[Any, ClusterCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _key(obj: KubeObject) -> _Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _version(obj: KubeObject) -> int:
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(text) if text.isdigit() else 0


class ClusterCache:
    """Objects of the resources asked for, kept current by the store's listener."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._objects: dict[str, dict[_Key, KubeObject]] = {}
        # Versions of deletions seen while a resource was being listed, so a stale list cannot resurrect.
        self._deleted: dict[str, dict[_Key, int]] = {}
        self._syncing: set[str] = set()
        self._generation = 0
        store.add_listener(self._on_event)

    @property
    def generation(self) -> int:
        """Grows with every change the store reports: equal values mean nothing changed in between."""
        return self._generation

    def _on_event(self, event_type: str, resource: str, obj: KubeObject) -> None:
        with self._lock:
            self._generation += 1
            if resource not in self._objects and resource not in self._syncing:
                return
            key = _key(obj)
            bucket = self._objects.setdefault(resource, {})
            if event_type == "DELETED":
                bucket.pop(key, None)
                self._deleted.setdefault(resource, {})[key] = _version(obj)
            else:
                current = bucket.get(key)
                if current is None or _version(current) <= _version(obj):
                    bucket[key] = obj

    def _sync(self, resource: str) -> None:
        with self._lock:
            if resource in self._objects and resource not in self._syncing:
                return
            self._syncing.add(resource)
        listed = self._store.list(resource)
        with self._lock:
            bucket = self._objects.setdefault(resource, {})
            deleted = self._deleted.pop(resource, {})
            for obj in listed:
                key = _key(obj)
                current = bucket.get(key)
                newer_seen = current is not None and _version(current) >= _version(obj)
                if not newer_seen and deleted.get(key, -1) < _version(obj):
                    bucket[key] = obj
            self._syncing.discard(resource)

    def list(self, resource: str, namespace: str | None = None) -> list[KubeObject]:
        """Cached objects of ``resource`` (shared: do not modify), optionally of one namespace."""
        self._sync(resource)
        with self._lock:
            values = list(self._objects.get(resource, {}).values())
        if namespace is None:
            return values
        return [obj for obj in values if (obj.get("metadata") or {}).get("namespace") == namespace]

    def get(self, resource: str, namespace: str | None, name: str) -> KubeObject | None:
        """One cached object, or None."""
        self._sync(resource)
        with self._lock:
            return self._objects.get(resource, {}).get((namespace or "", name))


class ChangeGate:
    """Remembers, per cache, the generation a controller last acted on, so an unchanged cluster is skipped.

    Only for controllers whose work does not depend on time (no grace periods or deadlines).
    """

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def unchanged(self, cache: ClusterCache) -> bool:
        """True when nothing changed since :meth:`mark` for this cache."""
        return self._seen.get(id(cache)) == cache.generation

    def mark(self, cache: ClusterCache, generation: int) -> None:
        """Record that the cluster as of ``generation`` (read before acting) has been handled."""
        self._seen[id(cache)] = generation


def cache_for(store: ObjectStore) -> ClusterCache:
    """The one cache of ``store``, made on first use."""
    with _CACHES_LOCK:
        cache = _CACHES.get(store)
        if cache is None:
            cache = ClusterCache(store)
            _CACHES[store] = cache
        return cache
