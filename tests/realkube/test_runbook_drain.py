"""Runbook against the real control plane: drain through the Eviction API, real budgets, real Job controller.

The story of ``tests/scenario/kube/test_runbook_drain.py`` for what a real cluster can run without our
emulated operators: the disruption controller computes each PodDisruptionBudget's ``disruptionsAllowed``,
kube-apiserver's eviction subresource decides (201, or 429 while the budget blocks), adds
``DisruptionTarget`` and deletes the pod gracefully; KWOK finishes the deletion as a kubelet would; the real
Job controller applies the Job's ``podFailurePolicy`` and creates the replacement, which kube-scheduler
places on a healthy node. The agents are the real ones (``build_agent``, drain on, permits from a live
aggregator), on real time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from live_aggregator import LiveAggregator
from realkube import TAINT_KEY, Cluster
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.state.machine import DebounceConfig
from agent.wiring import build_agent
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.report import PodOutcome
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.requeue.decisions import REQUEUED_ANNOTATION
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml

TOKEN = "realkube-drain-token-0123456789abcdef0123456789"
FAST_DRAIN = DrainPolicy(poll_interval_s=0.1, retry_initial_s=0.1, retry_max_s=0.5, pod_timeout_s=20.0)


@pytest.fixture
def five_nodes(kube_stack: ControlPlane) -> Iterator[Cluster]:
    """Five 8-GPU KWOK nodes: a 4-pod gang plus one spare for the replacement."""
    made = Cluster(kube_stack, nodes=5)
    yield made
    made.close()


@pytest.fixture
def aggregator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAggregator]:
    clock = ManualClock(start=utc_now())
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN, budget_min_nodes=2).start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


class Agents:
    """Real agents (drain on) on the cluster's nodes, started on first use."""

    def __init__(self, cluster: Cluster, aggregator: LiveAggregator, state_root: Path) -> None:
        self.cluster = cluster
        self.aggregator = aggregator
        self.state_root = state_root
        self.drain = FAST_DRAIN
        self.debounce = DebounceConfig()
        self.agents: dict[str, Agent] = {}
        self.nvml: dict[str, FakeNvml] = {}
        self.clients: list[client.ApiClient] = []

    def agent(self, node: str) -> Agent:
        if node not in self.agents:
            settings = AgentSettings(
                node_name=node,
                state_dir=self.state_root / node,
                policy=RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S),
                drain_by="agent",
                drain=self.drain,
                debounce=self.debounce,
                aggregator={"url": self.aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
                http=HttpSettings(enabled=False),
            )
            self.nvml[node] = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
            api_client = self.cluster.plane.api_client()
            self.clients.append(api_client)
            self.agents[node] = build_agent(
                settings, library=self.nvml[node], api_client=api_client, clock=RealClock()
            )
            self.tick(node)
        return self.agents[node]

    def tick(self, node: str) -> TickResult:
        agent = self.agents[node]
        result = agent.tick()
        assert agent.parts.link is not None
        agent.parts.link.deliver()
        return result

    def break_node(self, node: str) -> TickResult:
        agent = self.agent(node)
        feed = agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        agent.wake.clear()
        assert self.nvml[node].inject_xid(0, 79)
        assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
        return self.tick(node)

    def executor(self, node: str) -> KubernetesExecutor:
        executor = self.agents[node].parts.executor
        assert isinstance(executor, KubernetesExecutor)
        return executor

    def finish_drain(self, node: str) -> TickResult:
        assert self.executor(node).wait_for_drain(HANG_GUARD_S * 2), "the drain did not end"
        return self.tick(node)

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        for api_client in self.clients:
            api_client.close()


@pytest.fixture
def agents(five_nodes: Cluster, aggregator: LiveAggregator, tmp_path: Path) -> Iterator[Agents]:
    made = Agents(five_nodes, aggregator, tmp_path / "agents")
    yield made
    made.close()


def gang_job(name: str, *, pod_failure_policy: bool) -> dict[str, Any]:
    """A 4-pod Job, each pod taking all 8 GPUs of a node (one pod per node)."""
    container = {"name": "t", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    spec: dict[str, Any] = {
        "parallelism": 4,
        "completions": 4,
        "backoffLimit": 0 if pod_failure_policy else 3,
        "template": {
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
        },
    }
    if pod_failure_policy:
        spec["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def start_gang(cluster: Cluster, name: str, *, min_available: int, pod_failure_policy: bool = True) -> str:
    """The Job and a PDB over its pods; waits for 4 Running pods and for the disruption controller to
    compute the budget. Returns the label selector value (job name)."""
    policy = client.PolicyV1Api(cluster.admin)
    labels = {"batch.kubernetes.io/job-name": name}
    policy.create_namespaced_pod_disruption_budget(
        cluster.namespace,
        {
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
        },
    )
    client.BatchV1Api(cluster.admin).create_namespaced_job(
        cluster.namespace, gang_job(name, pod_failure_policy=pod_failure_policy)
    )
    assert wait_until(lambda: len(cluster.running(**labels)) == 4), "the Job's 4 pods never ran"

    def computed() -> bool:
        status = policy.read_namespaced_pod_disruption_budget(name, cluster.namespace).status
        return status is not None and status.expected_pods == 4 and status.current_healthy == 4

    assert wait_until(computed), "the disruption controller never computed the budget"
    return name


def start_daemonset(cluster: Cluster) -> dict[str, str]:
    """A node exporter on every node, created by the real DaemonSet controller; returns its pod labels."""
    labels = {"app": "exporter"}
    body = {
        "metadata": {"name": "exporter"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "e", "image": "exporter"}],
                },
            },
        },
    }
    client.AppsV1Api(cluster.admin).create_namespaced_daemon_set(cluster.namespace, body)
    count = len(cluster.node_names)
    assert wait_until(lambda: len(cluster.running(**labels)) == count), "the DaemonSet's pods never ran"
    return labels


def budget(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.to_dict(
        client.PolicyV1Api(cluster.admin).read_namespaced_pod_disruption_budget(name, cluster.namespace)
    )


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["uid"] for pod in pods}


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def tainted(cluster: Cluster, node: str) -> bool:
    return any(t["key"] == TAINT_KEY for t in cluster.node(node)["spec"].get("taints") or [])


def test_a_job_with_pod_failure_policy_is_drained_and_its_pod_replaced_by_the_real_job_controller(
    five_nodes: Cluster, agents: Agents
) -> None:
    """XID 79 under a 4-pod Job whose podFailurePolicy ignores DisruptionTarget, protected by a budget
    that allows one disruption (computed by the disruption controller): the agent evicts the pod (201),
    the requeue is left to the workload, the Job controller ignores the failure (status.failed stays 0)
    and replaces the pod on the spare node; the three other pods are untouched, and the DaemonSet's pod on
    the drained node stays (the drain skips DaemonSet pods, as kubectl drain --ignore-daemonsets does)."""
    cluster = five_nodes
    exporter = start_daemonset(cluster)
    labels = {"batch.kubernetes.io/job-name": start_gang(cluster, "ft", min_available=3)}
    assert budget(cluster, "ft")["status"]["disruptionsAllowed"] == 1
    before = cluster.running(**labels)
    bad = before[0]["spec"]["nodeName"]
    agents.agent(bad)

    agents.break_node(bad)
    news = drain_results(agents.finish_drain(bad))

    assert news[0][:2] == ("Drain", True), news
    assert news[1][0] == "Requeue" and "left-to-workload" in news[1][2], news

    def replaced_elsewhere() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and all(p["spec"]["nodeName"] != bad for p in pods)

    assert wait_until(replaced_elsewhere), "the Job controller's replacement never ran on a healthy node"
    assert len(uids(before) & uids(cluster.running(**labels))) == 3
    job = cluster.to_dict(client.BatchV1Api(cluster.admin).read_namespaced_job("ft", cluster.namespace))
    assert not job["status"].get("failed"), "the DisruptionTarget failure was counted against the Job"
    assert REQUEUED_ANNOTATION not in (job["metadata"].get("annotations") or {})
    assert cluster.node(bad)["spec"].get("unschedulable") is True and tainted(cluster, bad)
    assert [p["spec"]["nodeName"] for p in cluster.running(**exporter)].count(bad) == 1
    state = agents.executor(bad).drain_state
    assert state is not None and state.report is not None
    skipped = [p for p in state.report.pods if p.outcome is PodOutcome.SKIPPED]
    assert len(skipped) == 1 and skipped[0].name.startswith("exporter-"), state.report.pods


def test_a_job_without_pod_failure_policy_counts_the_eviction_and_still_replaces_the_pod(
    five_nodes: Cluster, agents: Agents
) -> None:
    """The same drain under a Job with no podFailurePolicy (backoffLimit 3): the real Job controller counts
    the evicted pod as one failure (status.failed 1) and replaces it on the spare node; the agent leaves
    the Job to itself (a plain Job has no fallback) and writes nothing to it."""
    cluster = five_nodes
    labels = {
        "batch.kubernetes.io/job-name": start_gang(
            cluster, "plain", min_available=3, pod_failure_policy=False
        )
    }
    bad = cluster.running(**labels)[0]["spec"]["nodeName"]
    agents.agent(bad)

    agents.break_node(bad)
    news = drain_results(agents.finish_drain(bad))

    assert news[0][:2] == ("Drain", True), news
    assert news[1][0] == "Requeue" and "left-to-workload" in news[1][2], news

    def replaced_elsewhere() -> bool:
        pods = cluster.running(**labels)
        return len(pods) == 4 and all(p["spec"]["nodeName"] != bad for p in pods)

    assert wait_until(replaced_elsewhere), "the Job controller's replacement never ran on a healthy node"
    batch = client.BatchV1Api(cluster.admin)
    assert wait_until(lambda: batch.read_namespaced_job("plain", cluster.namespace).status.failed == 1)
    job = cluster.to_dict(batch.read_namespaced_job("plain", cluster.namespace))
    assert REQUEUED_ANNOTATION not in (job["metadata"].get("annotations") or {})


def test_a_blocking_budget_answers_429_until_the_deadline_and_the_pod_stays(
    five_nodes: Cluster, agents: Agents
) -> None:
    """minAvailable 4 of 4: the disruption controller computes disruptionsAllowed 0; an eviction is a 429
    naming the budget; the agent's drain retries with backoff until the pod's deadline, leaves the pod
    ``blocked`` and Running, keeps the node cordoned and tainted, and requeues nothing."""
    cluster = five_nodes
    agents.drain = FAST_DRAIN.model_copy(update={"pod_timeout_s": 2.0})
    labels = {"batch.kubernetes.io/job-name": start_gang(cluster, "strict", min_available=4)}
    assert budget(cluster, "strict")["status"]["disruptionsAllowed"] == 0
    bad = cluster.running(**labels)[0]["spec"]["nodeName"]
    (stuck,) = [pod for pod in cluster.running(**labels) if pod["spec"]["nodeName"] == bad]

    with pytest.raises(ApiException) as refused:  # what every one of the agent's attempts gets
        cluster.core.create_namespaced_pod_eviction(
            stuck["metadata"]["name"],
            cluster.namespace,
            {"metadata": {"name": stuck["metadata"]["name"], "namespace": cluster.namespace}},
        )
    assert refused.value.status == 429
    status = json.loads(refused.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"

    agents.agent(bad)
    agents.break_node(bad)
    news = drain_results(agents.finish_drain(bad))

    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", False)], news
    assert news[0][2].startswith("drain incomplete") and "blocked" in news[0][2]
    state = agents.executor(bad).drain_state
    assert state is not None and state.report is not None
    (pod,) = [p for p in state.report.pods if p.uid == stuck["metadata"]["uid"]]
    assert pod.outcome is PodOutcome.BLOCKED and pod.attempts > 1
    assert stuck["metadata"]["uid"] in uids(cluster.running(**labels))
    assert cluster.node(bad)["spec"].get("unschedulable") is True and tainted(cluster, bad)


def test_after_the_drain_clean_readings_uncordon_and_untaint_the_node(
    five_nodes: Cluster, agents: Agents
) -> None:
    """Recovery after a drain: the incident closes, the drain permit goes back to the aggregator, our cordon
    and taint go, and the node takes work again."""
    cluster = five_nodes
    agents.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    labels = {"batch.kubernetes.io/job-name": start_gang(cluster, "rel", min_available=3)}
    bad = cluster.running(**labels)[0]["spec"]["nodeName"]
    gate = agents.agent(bad).parts.permits
    assert gate is not None
    agents.break_node(bad)
    assert gate.held is not None and gate.held.incident_id is not None
    agents.finish_drain(bad)

    closed = agents.tick(bad)

    assert closed.health.incident is None
    assert gate.held is None
    node = cluster.node(bad)
    assert not node["spec"].get("unschedulable") and not tainted(cluster, bad)
