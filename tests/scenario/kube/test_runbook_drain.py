"""Runbook: drain and requeue by the agent, behind a permit, on a 16-node emulated fleet (docs/drain.md, docs/requeue.md).

Every controller runs (scheduler, kubelet, job, daemonset, disruption, JobSet, Kueue, Volcano, ...) on real
time, as in ``tests/kube/test_requeue_e2e.py``: the drain waits for pods to really go, and the workload
controllers restart jobs on their own thread. Agents are the real ones (``build_agent``: fake NVML, the
Kubernetes executor with drain on, a live aggregator granting permits), started only on the nodes a test
breaks; each test drives their loop one pass at a time with ``tick()``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_rig import FleetRig, agent_settings
from live_aggregator import LiveAggregator
from waiting import HANG_GUARD_S, wait_until

from agent.loop import TickResult
from agent.settings import AgentSettings
from agent.state.machine import DebounceConfig
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.drain.report import PodOutcome
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.requeue.decisions import (
    EVENT_REASON,
    REQUEUED_ANNOTATION,
    KindMode,
    RequeuePolicy,
)
from remediation.plan.planner import RemediationPolicy
from sim.kube.harness import KubeSim, running_kube_sim

NS = "train"
TOKEN = "drain-scenario-token-0123456789abcdef0123456789"
FLEET = 16
PERMIT_RETRY_S = 0.3
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
VOLCANO_KEY = "jobs.batch.volcano.sh"
PDB_KEY = "poddisruptionbudgets.policy"
FAST_DRAIN = DrainPolicy(poll_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2, pod_timeout_s=10.0)


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    """16 GPU nodes with 8 GPUs each, every controller including the training-job operators."""
    with running_kube_sim(clock=RealClock(), nodes=FLEET, workloads=True, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


@pytest.fixture
def aggregator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAggregator]:
    """A live aggregator whose budget lets two nodes be remediated at once."""
    clock = ManualClock(start=utc_now())
    live = LiveAggregator(tmp_path / "aggregator.db", clock, TOKEN, budget_min_nodes=2).start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


class Fleet(FleetRig):
    """The agents started on the fleet's nodes (drain by the agent), and what the API server holds."""

    def __init__(self, kube: KubeSim, aggregator: LiveAggregator, state_root: Path) -> None:
        super().__init__(aggregator, state_root, settings=self.node_settings, connect=self.api_client_for)
        self.kube = kube
        self.drain = FAST_DRAIN
        self.debounce = DebounceConfig()
        self.requeue = RequeuePolicy()

    def node_settings(self, node: str, state_dir: Path) -> AgentSettings:
        return agent_settings(
            node,
            state_dir,
            self.aggregator,
            policy=RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S),
            drain_by="agent",
            drain=self.drain,
            requeue=self.requeue,
            debounce=self.debounce,
            link={"permit_retry_s": PERMIT_RETRY_S},
        )

    def api_client_for(self, _node: str) -> dict[str, Any]:
        return {"api_client": self.kube.api_client()}

    def executor(self, node: str) -> KubernetesExecutor:
        executor = self.agents[node].parts.executor
        assert isinstance(executor, KubernetesExecutor)
        return executor

    # --- the cluster ------------------------------------------------------------------------------------

    def running(self, **labels: str) -> list[dict[str, Any]]:
        """Running, not terminating pods of NS carrying ``labels``."""
        return [
            pod
            for pod in self.kube.store.list("pods", NS)
            if pod["status"].get("phase") == "Running"
            and "deletionTimestamp" not in pod["metadata"]
            and all(pod["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
        ]

    def node(self, name: str) -> dict[str, Any]:
        node = self.kube.store.get("nodes", None, name)
        assert node is not None
        return node

    def tainted(self, name: str) -> bool:
        return any(t["key"] == "gpuhealth.io/unhealthy" for t in self.node(name)["spec"].get("taints") or [])

    def requeue_events(self) -> list[dict[str, Any]]:
        return [e for e in self.kube.store.list("events", NS) if e.get("reason") == EVENT_REASON]


@pytest.fixture
def fleet(kube: KubeSim, aggregator: LiveAggregator, tmp_path: Path) -> Iterator[Fleet]:
    agents = Fleet(kube, aggregator, tmp_path / "agents")
    yield agents
    agents.close()


def gang_pod_spec() -> dict[str, Any]:
    """A pod taking all 8 GPUs of a node, so each node runs one pod of the gang."""
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}


def create_pdb(kube: KubeSim, name: str, labels: dict[str, str], *, min_available: int) -> None:
    """An integer minAvailable: the only form Kubernetes evaluates for pods of a Job (no scale subresource)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }
    kube.store.create(PDB_KEY, body)


def start_jobset(fleet: Fleet) -> dict[str, str]:
    """A 4-node JobSet without a restart rule, protected by a PDB (minAvailable 3: one pod may go); returns its pod labels."""
    job = {
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {"spec": gang_pod_spec()}}
    }
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": job}]},
    }
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm"}
    create_pdb(fleet.kube, "llm", labels, min_available=3)
    fleet.kube.store.create(JOBSET_KEY, body)
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the JobSet's 4 pods to run")
    return labels


def start_daemonset(fleet: Fleet) -> None:
    """A DaemonSet (node exporter) on every node: the drain must leave its pods alone."""
    template = {
        "metadata": {"labels": {"app": "exporter"}},
        "spec": {"containers": [{"name": "e", "image": "e"}], "terminationGracePeriodSeconds": 0},
    }
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "exporter", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "exporter"}}, "template": template},
    }
    fleet.kube.store.create("daemonsets.apps", body)
    wait_until(lambda: len(fleet.running(app="exporter")) == FLEET, message="the DaemonSet's pods to run")


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["uid"] for pod in pods}


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def test_xid_79_on_a_jobset_node_drains_it_and_restarts_the_jobset_once_off_the_node(fleet: Fleet) -> None:
    """XID 79 on a node of a 4-node JobSet (PDB minAvailable 3), with a DaemonSet on every node: permit
    granted, node cordoned and tainted, the gang pod evicted, the DaemonSet pod left, the JobSet restarted
    once (suspend toggle) with all 4 pods new and Running on healthy nodes, the incident id on the JobSet,
    and the drain and requeue in the aggregator's timeline."""
    start_daemonset(fleet)
    labels = start_jobset(fleet)
    before = uids(fleet.running(**labels))
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    exporter_before = uids([p for p in fleet.running(app="exporter") if p["spec"]["nodeName"] == bad])
    fleet.agent(bad)

    handled = fleet.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    assert drain_results(handled) == [("Drain", True, "drain started")]
    reported = fleet.finish_drain(bad)

    news = drain_results(reported)
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)]
    assert news[0][2].startswith("drain complete") and "requeued (suspend-toggle)" in news[1][2]

    def gang_restarted_elsewhere() -> bool:
        pods = fleet.running(**labels)
        return len(pods) == 4 and not before & uids(pods)

    wait_until(gang_restarted_elsewhere, message="four new Running pods of the JobSet")
    assert all(pod["spec"]["nodeName"] != bad for pod in fleet.running(**labels))
    jobset = fleet.kube.store.get(JOBSET_KEY, NS, "llm")
    assert jobset is not None
    assert jobset["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    assert len(fleet.requeue_events()) == 1
    assert fleet.node(bad)["spec"].get("unschedulable") is True and fleet.tainted(bad)
    exporter_after = uids([p for p in fleet.running(app="exporter") if p["spec"]["nodeName"] == bad])
    assert exporter_after == exporter_before  # the DaemonSet pod was never evicted
    timeline = fleet.timeline(bad)
    assert ("drain", "ok", "drain ok: drain started") in timeline
    assert any(action == "requeue" and "suspend-toggle" in message for action, _, message in timeline)

    assert drain_results(fleet.tick(bad)) == []  # never drained twice for the same incident


def test_with_every_kind_evict_only_the_drain_evicts_and_no_requeue_is_attempted(fleet: Fleet) -> None:
    """No kind in ``auto``: the pods are evicted and the workloads left to their own policies; the agent
    does not read the pods' owners at all (the chart grants no owner reads then), so no Requeue result."""
    modes = dict.fromkeys(("job", "jobset", "trainjob", "pytorchjob", "volcano_job", "kueue"), "evict-only")
    fleet.requeue = RequeuePolicy.model_validate(modes)
    assert all(getattr(fleet.requeue, kind) is KindMode.EVICT_ONLY for kind in modes)
    labels = start_jobset(fleet)
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)
    fleet.break_node(bad)

    news = drain_results(fleet.finish_drain(bad))

    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True)]
    assert fleet.requeue_events() == []
    jobset = fleet.kube.store.get(JOBSET_KEY, NS, "llm")
    assert jobset is not None and REQUEUED_ANNOTATION not in jobset["metadata"].get("annotations", {})


def start_side_job(fleet: Fleet, node: str) -> dict[str, str]:
    """A one-pod batch Job without GPUs pinned to ``node`` (next to a gang pod); returns its pod labels."""
    container = {"name": "s", "image": "s"}
    pod_spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [container],
    }
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "side", "namespace": NS},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": pod_spec}},
    }
    labels = {"batch.kubernetes.io/job-name": "side"}
    fleet.kube.store.create("jobs.batch", body)
    wait_until(lambda: len(fleet.running(**labels)) == 1, message="the side Job's pod to run")
    return labels


def test_jobset_mode_off_keeps_its_pod_on_the_drained_node_while_the_others_are_evicted(fleet: Fleet) -> None:
    """``jobset: off``: the drain leaves the JobSet's pod on the bad node untouched (same uid, no
    DisruptionTarget, no requeue, no annotation), reports it skipped with "requeue mode off for jobset" (named
    in the timeline's drain line), and still evicts the node's other pod (a plain Job's, mode auto)."""
    fleet.requeue = RequeuePolicy(jobset=KindMode.OFF)
    labels = start_jobset(fleet)
    (gang_pod,) = fleet.running(**labels)[:1]
    bad = gang_pod["spec"]["nodeName"]
    side_labels = start_side_job(fleet, bad)
    (side_pod,) = fleet.running(**side_labels)
    fleet.agent(bad)

    fleet.break_node(bad)
    news = drain_results(fleet.finish_drain(bad))

    assert news[0][:2] == ("Drain", True)  # a pod kept on purpose does not make the drain incomplete
    gang_name = gang_pod["metadata"]["name"]
    assert f"kept: {NS}/{gang_name} (requeue mode off for jobset)" in news[0][2]
    assert news[1][0] == "Requeue" and "jobset" not in news[1][2].lower()  # only the side Job is looked at
    state = fleet.executor(bad).drain_state
    assert state is not None and state.report is not None
    outcomes = {p.uid: (p.outcome, p.reason, p.attempts) for p in state.report.pods}
    assert outcomes[gang_pod["metadata"]["uid"]] == (PodOutcome.SKIPPED, "requeue mode off for jobset", 0)
    assert outcomes[side_pod["metadata"]["uid"]][0] is PodOutcome.EVICTED

    kept = fleet.kube.store.get("pods", NS, gang_name)
    assert kept is not None and kept["metadata"]["uid"] == gang_pod["metadata"]["uid"]
    assert kept["spec"]["nodeName"] == bad and "deletionTimestamp" not in kept["metadata"]
    conditions = kept["status"].get("conditions") or []
    assert all(c.get("type") != "DisruptionTarget" for c in conditions)
    assert side_pod["metadata"]["uid"] not in uids(fleet.kube.store.list("pods", NS))
    jobset = fleet.kube.store.get(JOBSET_KEY, NS, "llm")
    assert jobset is not None and REQUEUED_ANNOTATION not in jobset["metadata"].get("annotations", {})
    assert fleet.requeue_events() == []
    assert any(
        action == "drain" and "requeue mode off for jobset" in m for action, _, m in fleet.timeline(bad)
    )


def test_a_restarted_agent_does_not_drain_the_same_incident_again(fleet: Fleet) -> None:
    """The drain is remembered in the state file: after the agent restarts mid-incident, its passes plan
    no second drain and the node stays cordoned and tainted."""
    labels = start_jobset(fleet)
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)
    incident = fleet.break_node(bad).health.incident
    fleet.finish_drain(bad)

    fleet.restart(bad)
    later = [fleet.tick(bad) for _ in range(2)]

    assert incident is not None and all(r.health.incident == incident for r in later)
    assert all(drain_results(result) == [] for result in later)
    assert fleet.node(bad)["spec"].get("unschedulable") is True and fleet.tainted(bad)


def test_when_the_incident_closes_the_permit_is_released_and_the_node_uncordoned(fleet: Fleet) -> None:
    """After the drain, clean readings close the incident: our cordon and taint go, the drain permit is
    given back to the aggregator, and the drained node takes work again."""
    fleet.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    labels = start_jobset(fleet)
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    gate = fleet.agent(bad).parts.permits
    assert gate is not None
    fleet.break_node(bad)
    assert gate.held is not None and gate.held.incident_id is not None
    fleet.finish_drain(bad)

    closed = fleet.tick(bad)

    assert closed.health.incident is None
    assert gate.held is None
    assert not fleet.node(bad)["spec"].get("unschedulable") and not fleet.tainted(bad)


def test_job_with_pod_failure_policy_is_left_to_its_own_policy_and_its_pod_replaced(fleet: Fleet) -> None:
    """A 4-pod Job whose podFailurePolicy ignores DisruptionTarget: the drain evicts its pod on the bad
    node, the requeue writes nothing (left to the workload), and the Job replaces the pod on a healthy node."""
    rule = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ft", "namespace": NS},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "podFailurePolicy": {"rules": [rule]},
            "template": {"spec": gang_pod_spec()},
        },
    }
    labels = {"batch.kubernetes.io/job-name": "ft"}
    create_pdb(fleet.kube, "ft", labels, min_available=3)
    fleet.kube.store.create("jobs.batch", body)
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the Job's 4 pods to run")
    before = fleet.running(**labels)
    bad = before[0]["spec"]["nodeName"]
    fleet.agent(bad)

    fleet.break_node(bad)
    news = drain_results(fleet.finish_drain(bad))

    assert news[0][:2] == ("Drain", True)
    assert news[1][0] == "Requeue" and "left-to-workload" in news[1][2]

    def replaced_elsewhere() -> bool:
        pods = fleet.running(**labels)
        return len(pods) == 4 and all(p["spec"]["nodeName"] != bad for p in pods)

    wait_until(replaced_elsewhere, message="the evicted pod's replacement to run on a healthy node")
    assert len(uids(before) & uids(fleet.running(**labels))) == 3  # only the evicted pod was replaced
    job = fleet.kube.store.get("jobs.batch", NS, "ft")
    assert job is not None and REQUEUED_ANNOTATION not in (job["metadata"].get("annotations") or {})
    assert fleet.requeue_events() == []


def test_volcano_job_without_eviction_policy_is_restarted_once_through_a_command(fleet: Fleet) -> None:
    """A 4-pod Volcano job with no policies: drained node, one RestartJob Command (retryCount 1), all pods
    new and Running on healthy nodes, the incident id on the job."""
    body = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc", "namespace": NS},
        "spec": {"tasks": [{"name": "worker", "replicas": 4, "template": {"spec": gang_pod_spec()}}]},
    }
    fleet.kube.store.create(VOLCANO_KEY, body)
    labels = {"volcano.sh/job-name": "vc"}
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the Volcano job's 4 pods to run")
    before = uids(fleet.running(**labels))
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)

    incident = fleet.break_node(bad).health.incident
    news = drain_results(fleet.finish_drain(bad))

    assert incident is not None
    assert news[1][0] == "Requeue" and "requeued (volcano-restart-command)" in news[1][2]

    def restarted_elsewhere() -> bool:
        pods = fleet.running(**labels)
        return len(pods) == 4 and not before & uids(pods) and all(p["spec"]["nodeName"] != bad for p in pods)

    wait_until(restarted_elsewhere, message="four new Running pods of the Volcano job")
    vcjob = fleet.kube.store.get(VOLCANO_KEY, NS, "vc")
    assert vcjob is not None and vcjob["status"]["retryCount"] == 1
    assert vcjob["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id


def test_a_pdb_that_blocks_is_retried_then_left_blocked_at_the_deadline(fleet: Fleet) -> None:
    """A budget that allows no disruption: the eviction is retried with backoff (several attempts) until
    the pod's deadline, then the pod stays ``blocked`` on the node (never overridden), the node stays
    cordoned and tainted, the outcome says so in the timeline, and nothing is requeued."""
    fleet.drain = FAST_DRAIN.model_copy(update={"pod_timeout_s": 1.0})
    labels = start_jobset(fleet)
    fleet.kube.store.delete(PDB_KEY, NS, "llm")
    create_pdb(fleet.kube, "strict", labels, min_available=4)
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    (stuck,) = [pod for pod in fleet.running(**labels) if pod["spec"]["nodeName"] == bad]
    fleet.agent(bad)

    fleet.break_node(bad)
    news = drain_results(fleet.finish_drain(bad))

    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", False)]  # incomplete; no requeue
    assert news[0][2].startswith("drain incomplete") and "blocked" in news[0][2]
    state = fleet.executor(bad).drain_state
    assert state is not None and state.report is not None
    (pod,) = [p for p in state.report.pods if p.uid == stuck["metadata"]["uid"]]
    assert pod.outcome is PodOutcome.BLOCKED and pod.attempts > 1
    assert stuck["metadata"]["uid"] in uids(fleet.running(**labels))
    assert fleet.node(bad)["spec"].get("unschedulable") is True and fleet.tainted(bad)
    assert any(action == "drain" and result == "failed" for action, result, _ in fleet.timeline(bad))


def test_no_permit_keeps_the_node_tainted_evicts_nothing_and_asks_again_later(
    fleet: Fleet, aggregator: LiveAggregator
) -> None:
    """The aggregator is unreachable when XID 79 strikes: the node is tainted, no drain starts, no pod is
    evicted, and the node is not cordoned. Once the aggregator is back and the retry interval has passed,
    the next pass gets the permit and drains."""
    labels = start_jobset(fleet)
    before = uids(fleet.running(**labels))
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)
    aggregator.stop()

    handled = fleet.break_node(bad)

    assert drain_results(handled) == []
    assert any("no permit for drain" in note for note in handled.notes)
    assert fleet.tainted(bad) and not fleet.node(bad)["spec"].get("unschedulable")
    time.sleep(0.2)
    assert uids(fleet.running(**labels)) == before  # nothing evicted
    assert drain_results(fleet.tick(bad)) == []  # asked again only after permit_retry_s

    aggregator.start()
    time.sleep(PERMIT_RETRY_S)
    assert drain_results(fleet.tick(bad)) == [("Drain", True, "drain started")]
    assert fleet.executor(bad).wait_for_drain(HANG_GUARD_S)
    assert fleet.node(bad)["spec"].get("unschedulable") is True


def test_two_nodes_of_one_jobset_failing_together_restart_it_once(fleet: Fleet) -> None:
    """Two nodes of the same JobSet get XID 79 in the same window (one incident per node): both are drained
    (each with its own permit), the first requeue restarts the JobSet, the second finds that restart within
    the requeue policy's same-fault window and reports already-requeued: one restart, one Event, and the
    4 pods Running off both nodes."""
    labels = start_jobset(fleet)
    pods = fleet.running(**labels)
    first, second = pods[0]["spec"]["nodeName"], pods[1]["spec"]["nodeName"]
    fleet.agent(first)
    fleet.agent(second)

    fleet.break_node(first)
    fleet.break_node(second)
    news = [*drain_results(fleet.finish_drain(first)), *drain_results(fleet.finish_drain(second))]

    assert [kind for kind, _, _ in news if kind == "Drain"] == ["Drain", "Drain"]
    requeues = [detail for kind, _, detail in news if kind == "Requeue"]
    assert sum(": requeued (suspend-toggle)" in detail for detail in requeues) == 1
    assert all(": requeued" in d or ": already-requeued" in d for d in requeues)
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the JobSet's 4 pods to run again")
    assert all(pod["spec"]["nodeName"] not in (first, second) for pod in fleet.running(**labels))
    assert len(fleet.requeue_events()) == 1


def create_kueue_queues(kube: KubeSim, gpus: int) -> None:
    """A ResourceFlavor, a ClusterQueue with ``gpus`` of nominal quota, and LocalQueue ``team-a`` in NS."""
    kueue = "kueue.x-k8s.io/v1beta1"
    flavor = {"apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
    kube.store.create("resourceflavors.kueue.x-k8s.io", flavor)
    quota = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    group = {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": [quota]}]}
    cluster_queue = {
        "apiVersion": kueue,
        "kind": "ClusterQueue",
        "metadata": {"name": "gpus"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
    }
    kube.store.create("clusterqueues.kueue.x-k8s.io", cluster_queue)
    local = {"apiVersion": kueue, "kind": "LocalQueue", "metadata": {"name": "team-a", "namespace": NS}}
    kube.store.create("localqueues.kueue.x-k8s.io", {**local, "spec": {"clusterQueue": "gpus"}})


def test_kueue_managed_job_is_deactivated_and_readmitted_off_the_drained_node(fleet: Fleet) -> None:
    """A Kueue-managed 4-pod Job without a DisruptionTarget rule: drained node, Workload active false then
    true (Kueue evicts and re-admits the whole job), every pod new and Running on healthy nodes, the
    incident id on the Job."""
    create_kueue_queues(fleet.kube, gpus=64)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ft", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"suspend": True, "parallelism": 4, "completions": 4, "template": {"spec": gang_pod_spec()}},
    }
    fleet.kube.store.create("jobs.batch", body)
    labels = {"batch.kubernetes.io/job-name": "ft"}
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the admitted Job's 4 pods to run")
    before = uids(fleet.running(**labels))
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)

    incident = fleet.break_node(bad).health.incident
    news = drain_results(fleet.finish_drain(bad))

    assert incident is not None
    assert news[1][0] == "Requeue" and "requeued (workload-active-toggle)" in news[1][2]

    def readmitted_elsewhere() -> bool:
        pods = fleet.running(**labels)
        return len(pods) == 4 and not before & uids(pods) and all(p["spec"]["nodeName"] != bad for p in pods)

    wait_until(readmitted_elsewhere, message="four new Running pods after re-admission")
    job = fleet.kube.store.get("jobs.batch", NS, "ft")
    assert job is not None and job["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    assert len(fleet.requeue_events()) == 1


def test_pytorchjob_with_restart_policy_never_has_its_remaining_pods_recreated(fleet: Fleet) -> None:
    """A 4-worker PyTorchJob whose replicas never restart on their own: the drained node's worker is
    evicted and the requeue deletes the other workers, so the operator recreates the whole group, all
    Running on healthy nodes, the incident id on the PyTorchJob."""
    worker = {"replicas": 4, "restartPolicy": "Never", "template": {"spec": gang_pod_spec()}}
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": NS},
        "spec": {"pytorchReplicaSpecs": {"Worker": worker}},
    }
    fleet.kube.store.create("pytorchjobs.kubeflow.org", body)
    labels = {"training.kubeflow.org/job-name": "pt"}
    wait_until(lambda: len(fleet.running(**labels)) == 4, message="the PyTorchJob's 4 workers to run")
    before = uids(fleet.running(**labels))
    bad = fleet.running(**labels)[0]["spec"]["nodeName"]
    fleet.agent(bad)

    incident = fleet.break_node(bad).health.incident
    news = drain_results(fleet.finish_drain(bad))

    assert incident is not None
    assert news[1][0] == "Requeue" and "requeued (delete-pods)" in news[1][2]

    def recreated_elsewhere() -> bool:
        pods = fleet.running(**labels)
        return len(pods) == 4 and not before & uids(pods) and all(p["spec"]["nodeName"] != bad for p in pods)

    wait_until(recreated_elsewhere, message="four new Running workers")
    job = fleet.kube.store.get("pytorchjobs.kubeflow.org", NS, "pt")
    assert job is not None and job["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
