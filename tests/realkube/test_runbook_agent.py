"""Runbook against the real API server: the agent marks, taints, releases and yields to humans.

The same stories as ``tests/scenario/kube/test_runbook_faults.py`` and ``test_runbook_resilience.py``, told
against kube-apiserver 1.37 (strategic merge by the server's own schemas, resourceVersion preconditions,
Events) instead of the emulator. The agent's clock is manual (debounce, dwell, retry sleeps); the API server
and its controllers run on real time.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from realkube import Cluster, RealGpuNode
from scenario_rig import CLEAN_READINGS, DWELL_S
from waiting import wait_until

from core.clock import ManualClock
from core.steps import SetTaint
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from remediation.plan.planner import RemediationPolicy


def test_xid_79_sets_the_condition_keeps_ready_and_labels_taints_and_records_an_event_in_one_pass(
    gpu_node: RealGpuNode,
) -> None:
    """XID 79 -> GPUHealthy=False (reason XID_79) beside the kubelet's Ready=True, label unhealthy, taint
    reboot:NoSchedule, incident annotation and a GPUHealthUnhealthy Event, all from one pass."""
    gpu_node.tick()
    healthy = gpu_node.condition()
    assert healthy is not None and healthy["status"] == "True"

    gpu_node.xid(79, gpu=3)
    result = gpu_node.tick()

    assert result.health.incident is not None
    condition = gpu_node.condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "XID_79")
    ready = gpu_node.condition("Ready")
    assert ready is not None and ready["status"] == "True", "the strategic merge dropped the kubelet's Ready"
    assert gpu_node.label() == "unhealthy"
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/incident"] == result.health.incident.id
    assert gpu_node.events() == ["GPUHealthUnhealthy"]
    (event,) = [e for e in gpu_node.cluster.node_events(gpu_node.name) if e["reason"] == "GPUHealthUnhealthy"]
    assert event["involvedObject"]["kind"] == "Node" and event["type"] == "Warning"
    assert event["source"]["component"] == "gpuhealth-agent"
    assert not gpu_node.cordoned()


def test_xid_13_changes_nothing_on_the_node(gpu_node: RealGpuNode) -> None:
    """XID 13 is the application's fault: not one write, the node's resourceVersion unchanged."""
    gpu_node.ticks(3)
    writes, version = gpu_node.writes(), gpu_node.node()["metadata"]["resourceVersion"]

    gpu_node.xid(13)
    result = gpu_node.tick()

    assert result.steps == ()
    assert gpu_node.writes() == writes
    assert gpu_node.node()["metadata"]["resourceVersion"] == version
    assert gpu_node.taint() is None and gpu_node.label() == "healthy"


def test_a_healthy_agent_makes_zero_writes_over_an_hour_of_passes(gpu_node: RealGpuNode) -> None:
    """After the first pass marks the node healthy, 360 passes (an hour at 10 s) write nothing: the agent's
    write counter and the node's resourceVersion stay where they were."""
    gpu_node.tick()
    writes, version = gpu_node.writes(), gpu_node.node()["metadata"]["resourceVersion"]

    gpu_node.ticks(360)

    assert gpu_node.writes() == writes
    assert gpu_node.node()["metadata"]["resourceVersion"] == version


def test_release_after_recovery_needs_clean_readings_and_the_dwell(gpu_node: RealGpuNode) -> None:
    """Row remap pending -> reset_gpu taint; GPU reset -> kept until M clean readings and the dwell time ->
    taint and incident annotation gone, GPUHealthy=True, label healthy, GPUHealthRecovered Event."""
    gpu_node.tick()
    gpu_node.nvml.set_row_remap(2, pending=True)
    gpu_node.tick()
    assert gpu_node.taint() == "reset_gpu:NoSchedule"

    gpu_node.nvml.reset_gpu(2)
    gpu_node.ticks(CLEAN_READINGS, every_s=1.0)
    assert gpu_node.taint() == "reset_gpu:NoSchedule", "released before the dwell time"
    gpu_node.clock.advance(DWELL_S)
    result = gpu_node.tick()

    assert result.health.incident is None
    assert gpu_node.taint() is None
    condition = gpu_node.condition()
    assert condition is not None and condition["status"] == "True"
    assert gpu_node.label() == "healthy"
    assert gpu_node.events() == ["GPUHealthUnhealthy", "GPUHealthRecovered"]
    assert "gpuhealth.io/incident" not in (gpu_node.node()["metadata"].get("annotations") or {})


def test_a_human_uncordon_is_never_undone_for_the_same_incident(
    gpu_node: RealGpuNode, human: client.CoreV1Api
) -> None:
    """Cordon policy on: XID 79 -> cordoned and annotated as ours; a person uncordons (their own identity)
    -> the agent's watch sees it, records GPUHealthHumanOverride once, keeps the taint, never cordons again."""
    gpu_node.policy = RemediationPolicy(cordon=True)
    gpu_node.tick()
    gpu_node.xid(79)
    gpu_node.tick()
    assert gpu_node.cordoned()
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/cordoned"] == "true"

    human.patch_node(gpu_node.name, {"spec": {"unschedulable": False}})
    assert wait_until(lambda: not gpu_node.executor.facts().unschedulable), "the watch never saw the uncordon"
    gpu_node.tick()
    gpu_node.ticks(5)

    assert not gpu_node.cordoned()
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.events().count("GPUHealthHumanOverride") == 1


def test_a_restarted_agent_keeps_the_incident_and_writes_nothing(gpu_node: RealGpuNode) -> None:
    """Agent restarted mid-incident: same incident id from the state file; the node already is as it
    should be, so the new agent writes nothing and no second Event appears."""
    gpu_node.tick()
    gpu_node.xid(79)
    before = gpu_node.tick().health.incident
    assert before is not None

    gpu_node.restart_agent()
    after = gpu_node.ticks(3)[-1].health.incident

    assert after is not None and after.id == before.id
    assert gpu_node.executor.writes_total == 0
    assert gpu_node.events() == ["GPUHealthUnhealthy"]


def test_dry_run_plans_everything_and_leaves_the_node_untouched(gpu_node: RealGpuNode) -> None:
    """--dry-run: every step planned, nothing sent: the node's resourceVersion and Events unchanged."""
    gpu_node.dry_run = True
    version = gpu_node.node()["metadata"]["resourceVersion"]
    gpu_node.tick()
    gpu_node.xid(79)

    result = gpu_node.tick()

    assert {type(step).__name__ for step in result.steps} >= {"SetTaint", "SetCondition", "EmitEvent"}
    assert gpu_node.node()["metadata"]["resourceVersion"] == version
    assert gpu_node.events() == [] and gpu_node.writes() == 0


class RacingApiClient(client.ApiClient):
    """An API client that lets a person write the node just before the executor's first PATCH of it."""

    def __init__(self, configuration: client.Configuration, node: str, race: Any) -> None:
        super().__init__(configuration)
        self.node_path = f"/api/v1/nodes/{node}"
        self.race = race
        self.raced = 0

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PATCH" and url.split("?", maxsplit=1)[0].endswith(self.node_path) and not self.raced:
            self.raced += 1
            self.race()
        return super().call_api(method, url, *args, **kwargs)


def test_a_stale_resource_version_is_a_real_409_and_the_retry_keeps_both_taints(
    cluster: Cluster, clock: ManualClock, human: client.CoreV1Api
) -> None:
    """The taint patch carries the resourceVersion of the node as the executor last saw it. A person's taint
    lands just before the patch: kube-apiserver answers 409 Conflict, the executor reads the node and
    re-applies at once, and both taints are on the node (the person's first)."""
    node = cluster.node_names[0]
    maintenance = {"key": "maintenance", "effect": "NoSchedule"}

    def person_taints() -> None:
        human.patch_node(node, {"spec": {"taints": [maintenance]}})

    api_client = RacingApiClient(cluster.plane.configuration(), node, person_taints)
    executor = KubernetesExecutor(
        api_client,
        node,
        retry=RetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0),
        clock=clock.now,
        sleep=clock.advance,
    )
    try:
        assert executor.wait_synced(20.0)
        result = executor.apply([SetTaint("reboot")]).results[0]
    finally:
        executor.close()
        api_client.close()  # type: ignore[no-untyped-call]

    assert api_client.raced == 1
    assert (result.ok, result.attempts) == (True, 1)
    taints = [(t["key"], t.get("value"), t["effect"]) for t in cluster.node(node)["spec"]["taints"]]
    assert taints == [("maintenance", None, "NoSchedule"), ("gpuhealth.io/unhealthy", "reboot", "NoSchedule")]
