"""Runbook: humans, API outages, 429 storms, restarts and dry runs while a GPU is broken on gpu-node-0."""

from __future__ import annotations

from kubernetes import client
from scenario_rig import NODE, KubeGpuNode
from waiting import wait_until

from remediation.plan.planner import RemediationPolicy


def test_a_human_uncordon_is_not_undone_for_the_same_incident(
    gpu_node: KubeGpuNode, human: client.CoreV1Api
) -> None:
    """Cordon policy on: XID 79 -> cordoned (and annotated as ours); a human uncordons -> the agent notices,
    records a GPUHealthHumanOverride Event, keeps the taint, and never cordons again for this incident."""
    gpu_node.policy = RemediationPolicy(cordon=True)
    gpu_node.tick()
    gpu_node.xid(79)
    gpu_node.tick()
    assert gpu_node.cordoned()
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/cordoned"] == "true"

    human.patch_node(NODE, {"spec": {"unschedulable": False}})
    assert wait_until(lambda: not gpu_node.executor.facts().unschedulable), "the watch never saw the uncordon"
    gpu_node.tick()
    gpu_node.ticks(5)

    assert not gpu_node.cordoned()
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.events().count("GPUHealthHumanOverride") == 1


def test_an_api_outage_during_a_fault_is_survived_and_the_node_is_marked_when_it_returns(
    gpu_node: KubeGpuNode,
) -> None:
    """The API server answers 503 for five minutes as XID 79 strikes: the passes fail (logged, retried),
    the agent keeps running, and the first pass after the outage taints the node and sends the Event."""
    gpu_node.tick()
    gpu_node.sim.faults.outage(300)
    gpu_node.xid(79)

    during = gpu_node.tick()

    assert during.report.results and not any(result.ok for result in during.report.results)
    assert gpu_node.taint() is None
    gpu_node.clock.advance(300)
    gpu_node.tick()
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.label() == "unhealthy"
    assert gpu_node.events() == ["GPUHealthUnhealthy"]


def test_refused_connections_are_survived_too(gpu_node: KubeGpuNode) -> None:
    """The API server's listener is gone (connection refused) for five minutes: same outcome as a 503."""
    gpu_node.tick()
    gpu_node.sim.faults.outage(300, refuse_connections=True)
    gpu_node.xid(79)

    during = gpu_node.tick()

    assert not any(result.ok for result in during.report.results)
    gpu_node.clock.advance(300)  # the listener comes back on the same port
    gpu_node.tick()
    assert gpu_node.taint() == "reboot:NoSchedule"


def test_a_restarted_agent_keeps_the_incident_id_and_sends_no_duplicate_event(gpu_node: KubeGpuNode) -> None:
    """Agent pod restarted mid-incident: the state file on the node gives back the same incident; the new
    agent finds the node already as it should be and writes nothing."""
    gpu_node.tick()
    gpu_node.xid(79)
    before = gpu_node.tick().health.incident
    assert before is not None

    gpu_node.restart_agent()
    after = gpu_node.ticks(3)[-1].health.incident

    assert after is not None and after.id == before.id
    assert gpu_node.executor.writes_total == 0
    assert gpu_node.events() == ["GPUHealthUnhealthy"]
    assert gpu_node.node()["metadata"]["annotations"]["gpuhealth.io/incident"] == before.id


def test_a_429_storm_is_waited_out_as_retry_after_says_then_applied(gpu_node: KubeGpuNode) -> None:
    """Three node PATCHes answered 429 Retry-After: 2 -> the executor waits 2 s each time (on the clock),
    then the taint goes through in the same pass."""
    gpu_node.tick()
    requests_before = gpu_node.executor.requests_total
    gpu_node.sim.faults.inject(verb="patch", resource="nodes", status=429, retry_after=2, times=3)
    gpu_node.xid(79)

    result = gpu_node.tick()

    assert all(step.ok for step in result.report.results)
    assert gpu_node.taint() == "reboot:NoSchedule"
    assert gpu_node.sleep.waits[:3] == [2.0, 2.0, 2.0]
    retried = [step for step in result.report.results if step.attempts > 1]
    assert sum(step.attempts - 1 for step in retried) == 3
    # one request a step, but the state label and the incident annotation share one merge patch
    assert gpu_node.executor.requests_total - requests_before >= len(result.report.results) - 1 + 3


def test_dry_run_plans_everything_and_leaves_the_node_untouched(gpu_node: KubeGpuNode) -> None:
    """--dry-run: XID 79 is judged and every step planned and reported, but the node, its Events and the
    state file stay as they were."""
    gpu_node.dry_run = True
    version = gpu_node.version()
    gpu_node.tick()
    gpu_node.xid(79)

    result = gpu_node.tick()

    assert {type(step).__name__ for step in result.steps} >= {"SetTaint", "SetCondition", "EmitEvent"}
    assert gpu_node.version() == version
    assert gpu_node.taint() is None
    assert gpu_node.events() == []
    assert gpu_node.writes() == 0
    assert not (gpu_node.state_dir / "state.json").exists()
