"""The executor's watch of its own node: facts without polling, waking the loop on other people's changes
(a human uncordon, our taint removed), re-listing after 410 Expired, stopping promptly, and setup errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from structlog.testing import capture_logs
from waiting import HANG_GUARD_S, wait_until

from core.clock import ManualClock
from core.steps import Cordon, SetCondition, SetStateLabel, SetTaint
from remediation.kubernetes.errors import KubeExecutorError
from remediation.kubernetes.executor import KubernetesExecutor, executor_from_kubeconfig
from sim.kube.harness import KubeSim

NODE = "gpu-node-0"
StoredNode = Callable[..., dict[str, Any]]


def test_facts_come_from_the_watch_without_a_request_per_call(executor: KubernetesExecutor) -> None:
    """facts() is served from the cache: a hundred calls cost no request."""
    requests = executor.requests_total

    for _ in range(100):
        facts = executor.facts()

    assert facts.exists and facts.condition_status is None and not facts.unschedulable
    assert executor.requests_total == requests


def test_a_human_uncordon_wakes_the_loop_and_updates_the_facts(
    executor: KubernetesExecutor, human: client.CoreV1Api
) -> None:
    """We cordoned; a person uncordons with kubectl: wait_for_change is True and facts say so (the
    annotation is still there, which is how the planner knows not to cordon again for this incident)."""
    executor.apply([Cordon()])
    assert not executor.wait_for_change(0.3), "our own write must not wake the loop"

    human.patch_node(NODE, {"spec": {"unschedulable": False}})

    assert executor.wait_for_change(HANG_GUARD_S)
    facts = executor.facts()
    assert (facts.unschedulable, facts.cordoned_by_us) == (False, True)


def test_our_taint_removed_by_someone_else_is_seen_as_drift(
    executor: KubernetesExecutor, human: client.CoreV1Api
) -> None:
    """Someone deletes our taint while the GPU is still bad: the loop wakes and sees no taint to re-apply."""
    executor.apply([SetTaint("reboot")])
    assert executor.facts().taint_value == "reboot"

    human.patch_node(NODE, {"spec": {"taints": []}})

    assert executor.wait_for_change(HANG_GUARD_S)
    assert executor.facts().taint_value is None


def test_changes_outside_our_facts_do_not_wake_the_loop(
    executor: KubernetesExecutor, human: client.CoreV1Api, stored_node: StoredNode
) -> None:
    """A label we do not own changes: nothing for the planner, so no wake-up."""
    human.patch_node(NODE, {"metadata": {"labels": {"team": "research"}}})

    assert wait_until(lambda: stored_node()["metadata"]["labels"].get("team") == "research")
    assert not executor.wait_for_change(0.5)


def test_a_quiet_healthy_node_costs_no_writes_and_only_the_watch(
    executor: KubernetesExecutor,
) -> None:
    """Zero writes while nothing changes; the watch is one open request (bookmarks flow inside it)."""
    requests = executor.requests_total

    assert not executor.wait_for_change(1.0)

    assert executor.writes_total == 0
    assert executor.requests_total == requests


def test_after_410_expired_the_watch_lists_again_and_catches_up(
    make_executor: Callable[..., KubernetesExecutor], clock: ManualClock
) -> None:
    """The listener goes away while the node changes more often than the watch history keeps: on
    reconnect the resume version is too old (410 Expired), so the watch re-lists and sees the latest node."""
    with KubeSim(clock=clock, controllers=False, history_size=5, bookmark_interval_s=0.2) as small:
        small.store.create("nodes", {"metadata": {"name": NODE}, "spec": {}, "status": {}})
        api_client = small.api_client()
        executor = KubernetesExecutor(api_client, NODE, clock=clock.now, sleep=clock.advance)
        try:
            assert executor.wait_synced(HANG_GUARD_S)
            small.faults.outage(1, refuse_connections=True)
            for number in range(10):
                node = small.store.get("nodes", None, NODE)
                assert node is not None
                node.setdefault("metadata", {}).setdefault("labels", {})["step"] = str(number)
                if number == 9:
                    node["metadata"]["labels"]["gpuhealth.io/state"] = "quarantined"
                small.store.update("nodes", node)
            with capture_logs() as logs:
                clock.advance(1)  # the listener comes back
                assert executor.wait_for_change(HANG_GUARD_S)

            assert executor.facts().state_label == "quarantined"
            assert "node watch expired, listing again" in [entry["event"] for entry in logs]
        finally:
            executor.close()
            api_client.close()


def test_a_deleted_node_is_reported_as_not_existing(executor: KubernetesExecutor, sim: KubeSim) -> None:
    """The node object goes away (node deleted from the cluster): facts say exists=False."""
    sim.store.delete("nodes", None, NODE)

    assert executor.wait_for_change(HANG_GUARD_S)
    assert not executor.facts().exists


def test_without_a_watch_a_deleted_node_reads_as_not_existing(
    make_executor: Callable[..., KubernetesExecutor], sim: KubeSim
) -> None:
    """watch=False: the direct read answers 404 -> exists=False (not the last facts seen)."""
    executor = make_executor(watch=False)
    assert executor.facts().exists

    sim.store.delete("nodes", None, NODE)

    assert not executor.facts().exists


def test_close_stops_the_watch_within_a_second(
    make_executor: Callable[..., KubernetesExecutor],
) -> None:
    """close() shuts the watch's socket; the thread is gone well within a second."""
    executor = make_executor()

    started = time.monotonic()
    executor.close()

    assert time.monotonic() - started < 1.0


def test_without_a_watch_facts_read_the_node(
    make_executor: Callable[..., KubernetesExecutor],
) -> None:
    """watch=False (one-shot tools): facts() reads the node each call; wait_for_change just waits."""
    executor = make_executor(watch=False)
    executor.apply([SetCondition("False", "XID_79", "fallen off the bus"), SetStateLabel("unhealthy")])
    requests = executor.requests_total

    facts = executor.facts()

    assert (facts.condition_status, facts.condition_reason, facts.state_label) == (
        "False",
        "XID_79",
        "unhealthy",
    )
    assert executor.requests_total == requests + 1
    assert not executor.wait_for_change(0.05)


def test_facts_before_the_api_server_ever_answered_say_nothing_to_act_on(
    make_executor: Callable[..., KubernetesExecutor], sim: KubeSim
) -> None:
    """Started during an outage: facts() is exists=False (the planner acts on nothing) instead of raising."""
    sim.faults.outage(600)
    executor = make_executor(watch=False)

    assert executor.facts().exists is False


def test_facts_while_connections_are_refused_do_not_raise(
    make_executor: Callable[..., KubernetesExecutor], sim: KubeSim
) -> None:
    """The API server's listener is down (a restart): facts() still answers, exists=False."""
    executor = make_executor(watch=False)
    sim.faults.outage(600, refuse_connections=True)

    assert executor.facts().exists is False


def test_needs_resync_is_true_once_per_period(
    make_executor: Callable[..., KubernetesExecutor], clock: ManualClock
) -> None:
    """The loop re-plans from scratch every resync_s to repair drift the watch cannot show."""
    executor = make_executor(resync_s=300.0)

    assert not executor.needs_resync()
    clock.advance(299)
    assert not executor.needs_resync()
    clock.advance(1)
    assert executor.needs_resync()
    assert not executor.needs_resync()


def test_executor_from_a_kubeconfig_file_talks_to_that_server(sim: KubeSim, tmp_path: Path) -> None:
    """The agent's entry point: a kubeconfig path gives a working executor (which closes its own client)."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    executor = executor_from_kubeconfig(str(kubeconfig), NODE, watch=False)
    try:
        assert executor.apply([SetStateLabel("healthy")]).results[0].ok
        assert executor.facts().state_label == "healthy"
    finally:
        executor.close()


def test_a_missing_kubeconfig_is_one_clear_error(tmp_path: Path) -> None:
    """Bad configuration -> KubeExecutorError naming the file, not a client traceback."""
    missing = tmp_path / "nope"
    with pytest.raises(KubeExecutorError, match=f"cannot load kubeconfig {missing}"):
        executor_from_kubeconfig(str(missing), NODE)


def test_outside_a_cluster_in_cluster_config_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No service-account environment: KubeExecutorError, one line."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeExecutorError, match="cannot load in-cluster configuration"):
        executor_from_kubeconfig(None, NODE)


def test_an_empty_node_name_is_refused(sim: KubeSim) -> None:
    """NODE_NAME missing from the environment is a configuration error, said as such."""
    api_client = sim.api_client()
    try:
        with pytest.raises(KubeExecutorError, match="node name"):
            KubernetesExecutor(api_client, "", watch=False)
    finally:
        api_client.close()
