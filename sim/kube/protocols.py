"""The in-process seam between the emulated API server's object store and its simulated controllers.

The store (``sim/kube/store.py``) implements :class:`ObjectStore`; controllers (``sim/kube/controllers/``)
implement :class:`Controller` and touch cluster state only through the store, so every change they make
is visible to API clients exactly like a change made over HTTP (resourceVersion bump, watch event).

Resources are named by ``plural`` for the core group and ``plural.group`` otherwise: ``pods``,
``nodes``, ``events``, ``jobs.batch``, ``daemonsets.apps``, ``poddisruptionbudgets.policy``,
``leases.coordination.k8s.io``, ``jobsets.jobset.x-k8s.io``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from core.clock import Clock

KubeObject = dict[str, Any]
"""A Kubernetes object as plain JSON-compatible data (camelCase keys, as on the wire)."""

WatchListener = Callable[[str, str, KubeObject], None]
"""Called as ``listener(event_type, resource, obj)`` with event_type ADDED, MODIFIED or DELETED."""


class ObjectStore(Protocol):
    """Cluster state as controllers see it. Every write bumps ``metadata.resourceVersion``."""

    clock: Clock

    def get(self, resource: str, namespace: str | None, name: str) -> KubeObject | None:
        """A deep copy of the object, or None when it does not exist."""
        ...

    def list(self, resource: str, namespace: str | None = None) -> list[KubeObject]:
        """Deep copies of every object of the resource (in one namespace, or all when None)."""
        ...

    def create(self, resource: str, obj: KubeObject) -> KubeObject:
        """Store a new object; fills uid, creationTimestamp, generation and resourceVersion.

        ``metadata.generateName`` is honoured. Raises ``KeyError`` when the name is already taken.
        """
        ...

    def update(self, resource: str, obj: KubeObject) -> KubeObject:
        """Replace the object whole, spec and status alike (controllers own both).

        When ``metadata.resourceVersion`` is set and stale, raises ``sim.kube.protocols.Conflict``.
        Raises ``KeyError`` when the object does not exist.
        """
        ...

    def delete(self, resource: str, namespace: str | None, name: str) -> KubeObject | None:
        """Remove the object at once (graceful termination is the kubelet controller's job)."""
        ...

    def add_listener(self, listener: WatchListener) -> None:
        """Be told of every change after it is committed."""
        ...


class Conflict(Exception):
    """A write carried a stale ``metadata.resourceVersion`` (HTTP 409 on the wire)."""


class Controller(Protocol):
    """A simulated controller: level-triggered, idempotent reconciliation of the whole store.

    The controller manager calls :meth:`reconcile` after writes (coalesced) and on a periodic tick, from
    one thread, never while the store's lock is held.
    """

    name: str

    def reconcile(self, store: ObjectStore) -> None: ...
