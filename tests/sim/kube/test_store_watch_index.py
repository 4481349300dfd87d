"""The store hands each write only to the watch subscriptions that can match it (a large fleet's watches)."""

from __future__ import annotations

from core.clock import ManualClock
from sim.kube.store import MemoryStore, StoreEvent


def _store() -> MemoryStore:
    store = MemoryStore(clock=ManualClock())
    store.create("nodes", {"metadata": {"name": "n1"}})
    store.create("nodes", {"metadata": {"name": "n2"}})
    return store


def _cordon(store: MemoryStore, name: str) -> None:
    node = store.get("nodes", None, name)
    assert node is not None
    store.update("nodes", {**node, "spec": {"unschedulable": True}})


def test_a_named_subscription_receives_only_its_objects_events() -> None:
    """A watch on ``metadata.name=n1`` is not offered n2's changes; an unnamed one sees both."""
    store = _store()
    named: list[StoreEvent] = []
    every: list[StoreEvent] = []
    store.subscribe("nodes", named.append, None, name="n1")
    store.subscribe("nodes", every.append, None)
    _cordon(store, "n2")
    _cordon(store, "n1")
    assert [e.entry.name for e in named] == ["n1"]
    assert [e.entry.name for e in every] == ["n2", "n1"]


def test_cancelling_a_named_subscription_stops_its_events_only() -> None:
    """Two watches on the same name: cancelling one leaves the other receiving."""
    store = _store()
    first: list[StoreEvent] = []
    second: list[StoreEvent] = []
    _, cancel_first = store.subscribe("nodes", first.append, None, name="n1")
    store.subscribe("nodes", second.append, None, name="n1")
    cancel_first()
    store.delete("nodes", None, "n1")
    assert first == []
    assert [e.type for e in second] == ["DELETED"]
