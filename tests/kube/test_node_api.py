"""NodeApi, the executor's only requests: raw JSON over the REST paths, and a watch that can resume."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.api import NodeApi
from sim.kube.harness import KubeSim

NODE = "gpu-node-0"
OTHER_NODE = "gpu-node-1"


@pytest.fixture
def api_client(sim: KubeSim) -> Iterator[client.ApiClient]:
    """A client of the emulator, closed after the test."""
    api_client = sim.api_client()
    yield api_client
    api_client.close()


def test_the_watch_resumes_from_the_last_bookmark_not_from_where_it_started(
    sim: KubeSim, api_client: client.ApiClient
) -> None:
    """Events arrive as plain dicts, and the stream's resourceVersion follows every object and bookmark
    (so a reconnect does not replay history or run into 410 Expired needlessly)."""
    api = NodeApi(api_client, NODE, field_manager="test", request_timeout_s=5.0)
    _, start = api.list()
    assert start is not None
    other = sim.store.get("nodes", None, OTHER_NODE)
    assert other is not None
    other["metadata"].setdefault("labels", {})["touched"] = "yes"  # moves the global resourceVersion on
    newest = sim.store.update("nodes", other)["metadata"]["resourceVersion"]

    stream = api.watch(start, timeout_s=30)
    for event in stream:
        assert isinstance(event["raw_object"], dict)
        if event["type"] == "BOOKMARK" and int(event["raw_object"]["metadata"]["resourceVersion"]) >= int(
            newest
        ):
            stream.stop()
            break

    assert stream.resource_version is not None
    assert int(stream.resource_version) >= int(newest) > int(start)


def test_an_error_answer_raises_the_clients_exception_with_the_status(api_client: client.ApiClient) -> None:
    """A 404 from GET is the client's ApiException with status 404 (the executor's retry rules read it)."""
    api = NodeApi(api_client, "no-such-node", field_manager="test", request_timeout_s=5.0)
    with pytest.raises(ApiException) as raised:
        api.read()
    assert raised.value.status == 404
