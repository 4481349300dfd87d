"""Fault injection: the emulator answers chosen requests the way a struggling API server does.

API concepts "Retry-After" / client-go retry behaviour: https://kubernetes.io/docs/reference/using-api/api-concepts/
API Priority and Fairness (429 with Retry-After): https://kubernetes.io/docs/concepts/cluster-administration/flow-control/
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from kubernetes import client
from kubernetes.client import ApiException

from core.clock import ManualClock
from sim.kube.faults import FaultSpecError
from sim.kube.harness import KubeSim


def test_injected_429_on_patch_carries_retry_after(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """Flow control: a throttled write answers 429 TooManyRequests with a Retry-After header, for the
    number of requests asked, then the server answers normally again."""
    core.create_node({"metadata": {"name": "n1"}})
    bare_kube_sim.faults.inject(verb="patch", resource="nodes", status=429, retry_after=1, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
        assert caught.value.status == 429
        assert caught.value.headers["Retry-After"] == "1"
        assert json.loads(caught.value.body)["reason"] == "TooManyRequests"
    assert core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}).metadata.labels == {"a": "b"}


def test_reads_answered_503_with_retry_after_are_retried_by_the_client(
    bare_kube_sim: KubeSim, core: client.CoreV1Api
) -> None:
    """client-go retry semantics (kept by the official Python client): a read answered 5xx with
    Retry-After is retried; the list succeeds after the injected failures."""
    bare_kube_sim.faults.inject(verb="list", resource="nodes", status=503, retry_after=0, times=2)
    assert core.list_node().items == []
    assert bare_kube_sim.faults.injected == 2


def test_fault_matches_only_its_verb_and_resource(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """A rule for patch on nodes leaves gets of nodes and patches of pods alone."""
    core.create_node({"metadata": {"name": "n1"}})
    bare_kube_sim.faults.inject(verb="patch", resource="nodes", status=500, times=5)
    assert core.read_node("n1").metadata.name == "n1"
    with pytest.raises(ApiException) as caught:
        core.patch_node_status("n1", {"status": {}})
    assert caught.value.status == 500


def test_fault_window_in_seconds_follows_the_clock(
    bare_kube_sim: KubeSim, core: client.CoreV1Api, manual_clock: ManualClock
) -> None:
    """A fault for a span of time ends when the emulator's clock passes it."""
    bare_kube_sim.faults.inject(verb="get", resource="namespaces", status=409, seconds=10)
    with pytest.raises(ApiException) as caught:
        core.read_namespace("default")
    assert caught.value.status == 409
    manual_clock.advance(10)
    assert core.read_namespace("default").metadata.name == "default"


def test_injected_delay_slows_the_answer(bare_kube_sim: KubeSim, core: client.CoreV1Api) -> None:
    """A delay-only rule answers normally, late."""
    bare_kube_sim.faults.inject(verb="get", resource="namespaces", status=None, delay=0.3, times=1)
    started = time.monotonic()
    core.read_namespace("default")
    assert time.monotonic() - started >= 0.3


def test_outage_answers_503_until_it_ends(
    bare_kube_sim: KubeSim, core: client.CoreV1Api, manual_clock: ManualClock
) -> None:
    """An outage makes every request 503 ServiceUnavailable for its duration."""
    bare_kube_sim.faults.outage(seconds=30)
    answer = httpx.get(f"{bare_kube_sim.url}/api/v1/nodes")
    assert answer.status_code == 503
    assert answer.json()["reason"] == "ServiceUnavailable"
    manual_clock.advance(30)
    assert core.list_node().items == []


def test_outage_with_refused_connections_stops_the_listener(
    bare_kube_sim: KubeSim, manual_clock: ManualClock
) -> None:
    """An outage of the listener: connections are refused, then the same URL serves again."""
    url = bare_kube_sim.url
    bare_kube_sim.faults.outage(seconds=5, refuse_connections=True)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/version")
    manual_clock.advance(5)
    assert bare_kube_sim.url == url
    assert httpx.get(f"{url}/version").status_code == 200


def test_fault_without_a_window_is_refused(bare_kube_sim: KubeSim) -> None:
    """A rule needs times= or seconds=, and a known verb."""
    with pytest.raises(FaultSpecError):
        bare_kube_sim.faults.inject(verb="patch", status=500)
    with pytest.raises(FaultSpecError):
        bare_kube_sim.faults.inject(verb="frobnicate", status=500, times=1)
