"""The object store behind the emulator, through the ``ObjectStore`` protocol the controllers use.

API concepts "Resource versions": https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions
Finalizers: https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/
"""

from __future__ import annotations

import threading

import pytest

from core.clock import ManualClock
from sim.kube.protocols import Conflict
from sim.kube.store import HistoryExpiredError, MemoryStore, NamespaceNotFoundError, StoreEvent


@pytest.fixture
def store() -> MemoryStore:
    """A store with the default namespace."""
    memory = MemoryStore(clock=ManualClock())
    memory.create("namespaces", {"metadata": {"name": "default"}})
    return memory


def test_get_and_list_return_copies_the_caller_may_change(store: MemoryStore) -> None:
    """ObjectStore protocol: reads are deep copies; changing them does not change the store."""
    store.create("nodes", {"metadata": {"name": "n1", "labels": {"a": "b"}}})
    copy = store.get("nodes", None, "n1")
    assert copy is not None
    copy["metadata"]["labels"]["a"] = "changed"
    store.list("nodes")[0]["metadata"]["labels"]["a"] = "changed"
    stored = store.get("nodes", None, "n1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"a": "b"}


def test_create_duplicate_raises_key_error(store: MemoryStore) -> None:
    """ObjectStore protocol: a taken name raises KeyError."""
    store.create("nodes", {"metadata": {"name": "n1"}})
    with pytest.raises(KeyError):
        store.create("nodes", {"metadata": {"name": "n1"}})


def test_namespaced_create_needs_an_existing_namespace(store: MemoryStore) -> None:
    """API concepts: namespaced objects live in namespaces that exist."""
    with pytest.raises(NamespaceNotFoundError):
        store.create("pods", {"metadata": {"name": "p", "namespace": "ghost"}, "spec": {"containers": []}})


def test_stale_update_raises_conflict_and_unconditional_update_wins(store: MemoryStore) -> None:
    """API concepts "Concurrency control": a stale resourceVersion conflicts; none means unconditional."""
    first = store.create("nodes", {"metadata": {"name": "n1"}})
    store.update("nodes", {**first, "spec": {"unschedulable": True}})
    with pytest.raises(Conflict):
        store.update("nodes", {**first, "spec": {}})
    unconditional = {**first, "metadata": {**first["metadata"], "resourceVersion": ""}, "spec": {}}
    assert store.update("nodes", unconditional)["spec"] == {}


def test_update_that_changes_nothing_is_not_a_write(store: MemoryStore) -> None:
    """API concepts "Resource versions": a no-op update keeps the resourceVersion (no event)."""
    node = store.create("nodes", {"metadata": {"name": "n1"}})
    assert store.update("nodes", node)["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]


def test_listeners_hear_every_committed_change(store: MemoryStore) -> None:
    """ObjectStore protocol add_listener: ADDED, MODIFIED, DELETED with the object."""
    heard: list[tuple[str, str, str]] = []
    store.add_listener(lambda kind, resource, obj: heard.append((kind, resource, obj["metadata"]["name"])))
    node = store.create("nodes", {"metadata": {"name": "n1"}})
    store.update("nodes", {**node, "spec": {"unschedulable": True}})
    store.delete("nodes", None, "n1")
    assert heard == [("ADDED", "nodes", "n1"), ("MODIFIED", "nodes", "n1"), ("DELETED", "nodes", "n1")]


def test_finalizer_removal_completes_a_pending_deletion(store: MemoryStore) -> None:
    """Finalizers: a marked object goes away when an update removes its last finalizer."""
    cm = store.create(
        "configmaps", {"metadata": {"name": "c", "namespace": "default", "finalizers": ["x/y"]}}
    )
    store.mark_deleting("configmaps", "default", "c", 0)
    held = store.get("configmaps", "default", "c")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    store.update("configmaps", held)
    assert store.get("configmaps", "default", "c") is None
    assert cm["metadata"]["uid"]


def test_writers_cannot_clear_deletion_timestamp(store: MemoryStore) -> None:
    """API conventions: deletionTimestamp is set by the server and never unset by a client."""
    store.create("configmaps", {"metadata": {"name": "c", "namespace": "default", "finalizers": ["x/y"]}})
    store.mark_deleting("configmaps", "default", "c", 0)
    held = store.get("configmaps", "default", "c")
    assert held is not None
    del held["metadata"]["deletionTimestamp"]
    updated = store.update("configmaps", held)
    assert updated["metadata"]["deletionTimestamp"]


def test_subscription_replays_history_after_a_version(store: MemoryStore) -> None:
    """API concepts "Efficient detection of changes": events after a version are replayed in order."""
    rv = store.resource_version
    store.create("nodes", {"metadata": {"name": "a"}})
    store.create("nodes", {"metadata": {"name": "b"}})
    live: list[StoreEvent] = []
    start, cancel = store.subscribe("nodes", live.append, rv)
    store.create("nodes", {"metadata": {"name": "c"}})
    cancel()
    store.create("nodes", {"metadata": {"name": "d"}})
    assert [e.entry.name for e in start.backlog] == ["a", "b"]
    assert [e.entry.name for e in live] == ["c"]


def test_history_is_bounded_and_old_versions_expire() -> None:
    """API concepts "410 Gone responses": versions older than the kept history cannot be watched."""
    store = MemoryStore(clock=ManualClock(), history_size=3)
    rv = store.resource_version
    for index in range(5):
        store.create("nodes", {"metadata": {"name": f"n{index}"}})
    with pytest.raises(HistoryExpiredError):
        store.subscribe("nodes", lambda event: None, rv)
    start, cancel = store.subscribe("nodes", lambda event: None, store.resource_version - 2)
    cancel()
    assert len(start.backlog) == 2


def test_concurrent_writers_get_distinct_increasing_versions(store: MemoryStore) -> None:
    """API concepts "Resource versions": one global counter, thread-safe, no version handed out twice."""
    versions: list[int] = []
    lock = threading.Lock()

    def writer(prefix: str) -> None:
        for index in range(50):
            node = store.create("nodes", {"metadata": {"name": f"{prefix}-{index}"}})
            with lock:
                versions.append(int(node["metadata"]["resourceVersion"]))

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(versions)) == 200
