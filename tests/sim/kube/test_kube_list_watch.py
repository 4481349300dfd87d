"""Conformance of list and watch through the official client and ``kubernetes.watch.Watch``.

API concepts = https://kubernetes.io/docs/reference/using-api/api-concepts/
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from sim.kube.harness import KubeSim, running_kube_sim


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def _make_nodes(core: client.CoreV1Api, count: int) -> None:
    for index in range(count):
        core.create_node(_node(f"n{index:02d}", rack=str(index % 2)))


def test_list_reports_the_collection_resource_version(core: client.CoreV1Api) -> None:
    """API concepts "Resource versions": a list carries metadata.resourceVersion of the collection."""
    _make_nodes(core, 3)
    listed = core.list_node()
    assert int(listed.metadata.resource_version) >= max(
        int(n.metadata.resource_version) for n in listed.items
    )
    assert [n.metadata.name for n in listed.items] == ["n00", "n01", "n02"]


def test_list_items_omit_kind_and_api_version_on_the_wire(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """API concepts "Collections": a built-in list has kind NodeList; its items carry no type fields."""
    _make_nodes(core, 1)
    body = httpx.get(f"{bare_kube_sim.url}/api/v1/nodes").json()
    assert body["kind"] == "NodeList"
    assert body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0]


def test_label_selector_filters_list(core: client.CoreV1Api) -> None:
    """Labels and Selectors (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/)."""
    _make_nodes(core, 4)
    names = [n.metadata.name for n in core.list_node(label_selector="rack in (1)").items]
    assert names == ["n01", "n03"]


def test_field_selector_filters_pods_by_node(core: client.CoreV1Api) -> None:
    """Field Selectors (https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/):
    spec.nodeName selects the pods of one node, as kubectl drain lists them."""
    for name, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]}
        core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": spec})
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items
    assert [p.metadata.name for p in pods] == ["a", "c"]


def test_unsupported_field_selector_is_400(core: client.CoreV1Api) -> None:
    """Field Selectors "Supported fields": an unsupported field is 400 BadRequest."""
    with pytest.raises(ApiException) as caught:
        core.list_node(field_selector="status.phase=Running")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == "field label not supported: status.phase"


def test_malformed_label_selector_is_400(core: client.CoreV1Api) -> None:
    """Labels and Selectors: a selector that does not parse is 400 BadRequest."""
    with pytest.raises(ApiException) as caught:
        core.list_node(label_selector="a in (b")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["reason"] == "BadRequest"


def test_limit_and_continue_page_through_a_consistent_snapshot(core: client.CoreV1Api) -> None:
    """API concepts "Retrieving large results sets in chunks": limit + continue; later pages come from
    the same snapshot even when objects change meanwhile; remainingItemCount is reported."""
    _make_nodes(core, 5)
    first = core.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["n00", "n01"]
    assert first.metadata.remaining_item_count == 3
    core.create_node(_node("n99"))
    core.delete_node("n03")
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["n02", "n03"]
    third = core.list_node(limit=2, _continue=second.metadata._continue)
    assert [n.metadata.name for n in third.items] == ["n04"]
    assert third.metadata._continue is None
    assert third.metadata.resource_version == first.metadata.resource_version


def test_invalid_continue_token_is_400(core: client.CoreV1Api) -> None:
    """API concepts "Retrieving large results sets in chunks": the token is opaque; garbage is refused."""
    with pytest.raises(ApiException) as caught:
        core.list_node(limit=1, _continue="not-a-token")
    assert caught.value.status == 400


def test_expired_continue_token_is_410(core: client.CoreV1Api) -> None:
    """API concepts "Retrieving large results sets in chunks": a token whose snapshot is gone is 410."""
    _make_nodes(core, 3)
    first = core.list_node(limit=1)
    for _ in range(40):  # each new paged list keeps a snapshot; old ones are dropped
        core.list_node(limit=1)
        core.patch_node("n00", {"metadata": {"labels": {"tick": str(time.monotonic_ns())}}})
    with pytest.raises(ApiException) as caught:
        core.list_node(limit=1, _continue=first.metadata._continue)
    assert caught.value.status == 410
    assert json.loads(caught.value.body)["reason"] == "Expired"


def _collect(stream: Any, until: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for event in stream:
        events.append(event)
        if len(events) >= until:
            break
    return events


def test_watch_from_resource_version_sends_later_changes(core: client.CoreV1Api) -> None:
    """API concepts "Efficient detection of changes": a watch from a list's resourceVersion sends every
    change after it, in order (ADDED, MODIFIED, DELETED)."""
    _make_nodes(core, 1)
    rv = core.list_node().metadata.resource_version
    core.create_node(_node("new"))
    core.patch_node("new", {"metadata": {"labels": {"x": "y"}}})
    core.delete_node("new")
    w = watch.Watch()
    events = _collect(w.stream(core.list_node, resource_version=rv, timeout_seconds=5), 3)
    w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
    ]
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions)


def test_watch_without_resource_version_starts_with_current_objects(core: client.CoreV1Api) -> None:
    """API concepts "Semantics for watch": resourceVersion unset sends synthetic ADDED for what exists."""
    _make_nodes(core, 2)
    w = watch.Watch()
    events = _collect(w.stream(core.list_node, timeout_seconds=5), 2)
    w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "n00"), ("ADDED", "n01")]


def test_watch_sees_live_changes(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """API concepts "Efficient detection of changes": events arrive while the stream is open."""
    rv = core.list_node().metadata.resource_version

    def write_later() -> None:
        time.sleep(0.2)
        bare_kube_sim.store.create("nodes", _node("late"))

    writer = threading.Thread(target=write_later)
    writer.start()
    w = watch.Watch()
    events = _collect(w.stream(core.list_node, resource_version=rv, timeout_seconds=5), 1)
    w.stop()
    writer.join()
    assert events[0]["type"] == "ADDED"
    assert events[0]["object"].metadata.name == "late"


def test_watch_with_label_selector_turns_transitions_into_added_and_deleted(core: client.CoreV1Api) -> None:
    """API concepts "Semantics for watch": with a selector, an object that starts matching is ADDED and
    one that stops matching is DELETED."""
    core.create_node(_node("n1"))
    rv = core.list_node().metadata.resource_version
    core.patch_node("n1", {"metadata": {"labels": {"gpuhealth.io/state": "unhealthy"}}})
    core.patch_node("n1", {"metadata": {"labels": {"gpuhealth.io/state": "healthy"}}})
    w = watch.Watch()
    stream = w.stream(
        core.list_node, resource_version=rv, label_selector="gpuhealth.io/state=unhealthy", timeout_seconds=5
    )
    events = _collect(stream, 2)
    w.stop()
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_watch_ends_at_timeout_seconds(core: client.CoreV1Api) -> None:
    """API reference "watch" parameter timeoutSeconds: the server ends the stream after that time."""
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    assert events == []
    assert 0.9 <= time.monotonic() - started < 5


def test_watch_bookmarks_carry_only_a_resource_version(core: client.CoreV1Api) -> None:
    """API concepts "Watch bookmarks": with allowWatchBookmarks, BOOKMARK events carry only
    metadata.resourceVersion, periodically and when the stream ends."""
    _make_nodes(core, 1)
    current = core.list_node().metadata.resource_version
    w = watch.Watch()
    events = list(
        w.stream(core.list_node, resource_version=current, allow_watch_bookmarks=True, timeout_seconds=2)
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2
    assert bookmarks[-1]["raw_object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": current},
    }
    assert w.resource_version == current


def test_watch_from_a_version_older_than_history_gets_410_expired() -> None:
    """API concepts "410 Gone responses": a watch from a version the server no longer has receives an
    ERROR event with a 410 Expired Status; kubernetes.watch.Watch raises ApiException(410)."""
    with running_kube_sim(controllers=False, history_size=5) as sim:
        core = client.CoreV1Api(sim.api_client())
        old_rv = core.list_node().metadata.resource_version
        _make_nodes(core, 10)
        with pytest.raises(ApiException) as caught:
            list(watch.Watch().stream(core.list_node, resource_version=old_rv, timeout_seconds=2))
        assert caught.value.status == 410
        raw = httpx.get(f"{sim.url}/api/v1/nodes", params={"watch": "true", "resourceVersion": old_rv}).text
        event = json.loads(raw.splitlines()[0])
        assert event["type"] == "ERROR"
        assert event["object"]["reason"] == "Expired"
        assert event["object"]["code"] == 410
        assert event["object"]["message"].startswith("too old resource version")


def test_watch_with_field_selector_on_pods_of_a_node(core: client.CoreV1Api) -> None:
    """Field Selectors on watches: only the pods of the selected node are streamed."""
    rv = core.list_namespaced_pod("default").metadata.resource_version
    for name, node in (("a", "n1"), ("b", "n2")):
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36"}]}
        core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": spec})
    w = watch.Watch()
    events = list(
        w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=rv,
            field_selector="spec.nodeName=n2",
            timeout_seconds=1,
        )
    )
    assert [e["object"].metadata.name for e in events] == ["b"]


def test_send_initial_events_ends_with_annotated_bookmark(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """API concepts "Streaming lists": sendInitialEvents ends the initial ADDED burst with a bookmark
    annotated k8s.io/initial-events-end."""
    _make_nodes(core, 2)
    params = {
        "watch": "1",
        "sendInitialEvents": "true",
        "allowWatchBookmarks": "true",
        "resourceVersionMatch": "NotOlderThan",
        "timeoutSeconds": "1",
    }
    lines = httpx.get(f"{bare_kube_sim.url}/api/v1/nodes", params=params, timeout=5).text.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
