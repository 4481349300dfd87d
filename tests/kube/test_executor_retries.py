"""Retries at the API boundary: which errors are retried, how long the executor waits, and that an API
server outage never raises out of ``apply`` (the agent loop simply applies again on its next tick).

Faults come from the emulator's injector; the executor's sleep moves the emulator's manual clock, so a
"60 s outage" costs no real time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.clock import ManualClock
from core.steps import EmitEvent, SetCondition, SetStateLabel, SetTaint, Step
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from sim.kube.harness import KubeSim

StoredNode = Callable[..., dict[str, Any]]
TAINT = {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"}


def test_a_conflict_on_the_taint_patch_is_retried_after_a_fresh_read(
    executor: KubernetesExecutor, sim: KubeSim, stored_node: StoredNode, sleep: Any
) -> None:
    """409 Conflict on the patch made from the watch's copy -> read the node, re-apply at once; a second
    409 (the fresh read lost a race too) goes to the retry policy's backoff, and the taint lands."""
    sim.faults.inject(verb="patch", resource="nodes", status=409, times=2)
    requests = executor.requests_total

    result = executor.apply([SetTaint("reboot")]).results[0]

    assert (result.ok, result.attempts) == (True, 2)
    assert stored_node()["spec"]["taints"] == [TAINT]
    # patch (409), read, patch (409); after the backoff: patch from the copy that read refreshed
    assert executor.requests_total - requests == 4
    assert sleep.waits == [0.2]


def test_a_synced_executor_taints_with_one_request(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """The fault's taint is the write that matters most: made from the watch's copy of the node (its
    resourceVersion guards it), with no read before it."""
    requests = executor.requests_total

    assert executor.apply([SetTaint("reboot")]).results[0].ok

    assert executor.requests_total - requests == 1
    assert stored_node()["spec"]["taints"] == [TAINT]


def test_a_real_concurrent_change_gives_409_and_the_retry_keeps_it(
    executor: KubernetesExecutor, sim: KubeSim, stored_node: StoredNode
) -> None:
    """The taint patch carries the resourceVersion of the node as last seen: a write in between (a human's
    taint, made in the store as the API server reads the node to apply our patch) turns it into 409; the
    executor reads the node and re-applies at once, keeping both taints."""
    human_taint = {"key": "maintenance", "effect": "NoSchedule"}
    original_get = sim.store.get_entry
    raced: list[bool] = []

    def get_then_race(resource: str, namespace: str | None, name: str) -> Any:
        entry = original_get(resource, namespace, name)
        if resource == "nodes" and name == "gpu-node-0" and not raced:
            raced.append(True)
            node = sim.store.get("nodes", None, name)
            assert node is not None
            node["spec"]["taints"] = [human_taint]
            sim.store.update("nodes", node)
        return entry

    sim.store.get_entry = get_then_race  # type: ignore[method-assign]
    try:
        result = executor.apply([SetTaint("reboot")]).results[0]
    finally:
        sim.store.get_entry = original_get  # type: ignore[method-assign]

    assert raced
    assert (result.ok, result.attempts) == (True, 1)
    assert stored_node()["spec"]["taints"] == [human_taint, TAINT]


def test_429_waits_what_retry_after_says_then_applies(
    executor: KubernetesExecutor, sim: KubeSim, stored_node: StoredNode, sleep: Any
) -> None:
    """Throttled twice with Retry-After: 3 -> the executor waits 3 s each time (not its own backoff)."""
    sim.faults.inject(verb="patch", resource="nodes", status=429, retry_after=3, times=2)

    result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert (result.ok, result.attempts) == (True, 3)
    assert sleep.waits == [3.0, 3.0]
    assert stored_node()["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"


def test_a_429_storm_backs_off_and_gives_up_within_the_deadline(
    executor: KubernetesExecutor, sim: KubeSim, sleep: Any
) -> None:
    """Retry-After: 4 for a long while: two waits fit in the 10 s deadline, a third would not -> ok=False."""
    sim.faults.inject(verb="patch", resource="nodes", status=429, retry_after=4, seconds=600)

    result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert not result.ok
    assert result.detail.startswith("HTTP 429")
    assert sleep.waits == [4.0, 4.0]
    assert sum(sleep.waits) <= 10.0


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried(
    executor: KubernetesExecutor, sim: KubeSim, status: int, stored_node: StoredNode
) -> None:
    """5xx is transient: retried until it passes."""
    sim.faults.inject(verb="patch", resource="nodes", status=status, times=1)

    result = executor.apply([SetStateLabel("degraded")]).results[0]

    assert (result.ok, result.attempts) == (True, 2)
    assert stored_node()["metadata"]["labels"]["gpuhealth.io/state"] == "degraded"


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_client_errors_are_not_retried(
    executor: KubernetesExecutor, sim: KubeSim, status: int, sleep: Any
) -> None:
    """403 (RBAC or the admission policy), 404, 400, 422: asking again gets the same answer -> ok=False now."""
    sim.faults.inject(verb="patch", resource="nodes", status=status, times=5)

    result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert (result.ok, result.attempts) == (False, 1)
    assert result.detail.startswith(f"HTTP {status}")
    assert sleep.waits == []


def test_an_invalid_taint_value_is_a_422_from_the_server_and_not_retried(
    executor: KubernetesExecutor, stored_node: StoredNode
) -> None:
    """The API server's own validation (not an injected fault) refuses a bad label value once."""
    result = executor.apply([SetTaint("not a valid value!")]).results[0]

    assert (result.ok, result.attempts) == (False, 1)
    assert "422" in result.detail
    assert "taints" not in stored_node()["spec"]


def test_an_outage_longer_than_the_deadline_fails_the_pass_then_the_next_apply_succeeds(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock, stored_node: StoredNode, sleep: Any
) -> None:
    """A minute of 503s: the first step spends its 10 s deadline, the rest are skipped at once (no
    exception, no minute-long block); once the server is back, the loop's next apply puts it all in place."""
    sim.faults.outage(60)
    steps: list[Step] = [SetCondition("False", "XID_79", "fallen off the bus"), SetTaint("reboot")]

    during = executor.apply(steps)

    assert [r.ok for r in during.results] == [False, False]
    assert during.results[0].detail.startswith("HTTP 503")
    assert during.results[1].attempts == 0
    assert during.results[1].detail.startswith("skipped: API server unavailable (HTTP 503")
    assert sum(sleep.waits) <= 10.0

    clock.advance(60)
    after = executor.apply(steps)

    assert [r.ok for r in after.results] == [True, True]
    assert stored_node()["spec"]["taints"] == [TAINT]


def test_a_retry_after_longer_than_the_deadline_is_honoured_across_passes(
    executor: KubernetesExecutor, sim: KubeSim, clock: ManualClock, stored_node: StoredNode, sleep: Any
) -> None:
    """429 with Retry-After: 30 (more than the 10 s deadline): the pass fails at once without waiting,
    the next passes within those 30 s send nothing, and the first pass after them applies."""
    sim.faults.inject(verb="patch", resource="nodes", status=429, retry_after=30, times=1)

    first = executor.apply([SetStateLabel("unhealthy")]).results[0]
    requests = executor.requests_total
    clock.advance(20)
    second = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert (first.ok, first.attempts) == (False, 1)
    assert sleep.waits == []
    assert (second.ok, second.attempts, second.detail) == (
        False,
        0,
        "HTTP 429 throttled: waiting for Retry-After",
    )
    assert executor.requests_total == requests

    clock.advance(10)
    third = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert third.ok
    assert stored_node()["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"


def test_connection_refused_is_retried_until_the_listener_is_back(
    executor: KubernetesExecutor, sim: KubeSim, stored_node: StoredNode, sleep: Any
) -> None:
    """The API server restarts (connection refused for 1 s on the emulator's clock): a transport error,
    retried; the executor's waits move the clock, the listener returns, and the write lands."""
    sim.faults.outage(1, refuse_connections=True)

    result = executor.apply([SetStateLabel("unhealthy")]).results[0]

    assert result.ok, result.detail
    assert result.attempts > 1
    assert stored_node()["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"


def test_an_api_server_that_never_answers_costs_a_bounded_number_of_attempts(
    make_executor: Callable[..., KubernetesExecutor], sim: KubeSim, sleep: Any
) -> None:
    """With attempts=3 the step stops after three tries, whatever the deadline."""
    executor = make_executor(retry=RetrySettings(attempts=3, initial_wait_s=0.1, deadline_s=60))
    sim.faults.outage(600)

    result = executor.apply([EmitEvent("GPUHealthUnhealthy", "XID 79", key="k")]).results[0]

    assert (result.ok, result.attempts) == (False, 3)
    assert sleep.waits == [0.1, 0.2]


def test_retry_settings_reject_nonsense() -> None:
    """Zero attempts or a non-positive deadline are configuration errors (pydantic ValidationError)."""
    with pytest.raises(ValueError, match="attempts"):
        RetrySettings(attempts=0)
    with pytest.raises(ValueError, match="deadline_s"):
        RetrySettings(deadline_s=0)
