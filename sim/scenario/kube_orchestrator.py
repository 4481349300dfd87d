"""The Kubernetes side of a scenario: ``sim.kube`` with every controller, JobSet training and inference.

The API server runs in this process over real HTTP; each agent gets its own API client, as a DaemonSet pod
would. What the agents did is read back from the emulator's store (the same objects the API serves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from agent.wiring import build_agent
from core.clock import RealClock
from remediation.kubernetes.names import CORDONED_ANNOTATION, STATE_LABEL, TAINT_KEY
from sim.fakes.nvml import FakeNvml
from sim.kube.fleet import build_fleet
from sim.kube.harness import KubeSim
from sim.kube.kubeconfig import DUMMY_TOKEN, write_kubeconfig
from sim.kube.podresources import PodResourcesServer
from sim.scenario.agents import DEMO_DRAIN
from sim.scenario.model import InferenceService, Role, TrainingJob, Workloads
from sim.scenario.orchestrator import JobView, NodeView
from sim.scenario.recovery import simulated_recovery

JOBSET_KEY = "jobsets.jobset.x-k8s.io"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_LABEL = "batch.kubernetes.io/job-name"
PDB_KEY = "poddisruptionbudgets.policy"
POLL_S = 0.05
# One API client (one connection pool) for every agent: a client per agent costs a pool and its buffers
# each, which at a thousand agents is most of the process's memory. Watches hold a connection each; the
# pool keeps this many for reuse and opens (then drops) extra ones as requests need them.
SHARED_POOL_CONNECTIONS = 64


def shared_client(url: str, token: str) -> client.ApiClient:
    """One API client for many agents of one process (see ``SHARED_POOL_CONNECTIONS``)."""
    configuration = client.Configuration(host=url, api_key={"authorization": f"Bearer {token}"})
    configuration.connection_pool_maxsize = SHARED_POOL_CONNECTIONS
    return client.ApiClient(configuration)


def running_pods(pods: Iterable[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The pods Running and not being deleted that carry every one of ``labels``."""
    return [
        pod
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Running"
        and "deletionTimestamp" not in pod["metadata"]
        and all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
    ]


def kube_agent(settings: AgentSettings, library: NvmlLibrary, api_client: client.ApiClient) -> Agent:
    """A node's real agent on the API server behind ``api_client``, with simulated recovery."""
    return build_agent(
        settings,
        library=library,
        api_client=api_client,
        clock=RealClock(),
        recovery_actions=simulated_recovery(settings, library),
    )


def pod_spec(gpus: int) -> dict[str, Any]:
    """A workload pod taking ``gpus`` GPUs, never restarted in place, gone at once when deleted."""
    container = {"name": "main", "image": "demo", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}


def training_jobset(
    job: TrainingJob, namespace: str, gpus: int, *, restart_on_eviction: bool = False
) -> dict[str, Any]:
    """The training job: a JobSet of ``job.nodes`` one-pod Jobs, each pod taking a whole node, with a
    backoff the eviction does not exhaust. Without a failure policy the remediator restarts it with the
    suspend toggle; with ``restart_on_eviction`` (docs/requeue.md's recipe) the JobSet restarts itself on
    the evicted pod's ``DisruptionTarget`` (``podFailurePolicy: FailJob``,
    ``RestartJobSetAndIgnoreMaxRestarts``) and the remediator leaves it to it."""
    job_spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 3,
        "template": {"spec": pod_spec(gpus)},
    }
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "workers", "replicas": job.nodes, "template": {"spec": job_spec}}]
    }
    if restart_on_eviction:
        job_spec["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
        spec["failurePolicy"] = {
            "maxRestarts": 0,
            "rules": [
                {
                    "name": "evicted",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": spec,
    }


def training_pdb(job: TrainingJob, namespace: str) -> dict[str, Any] | None:
    """The training job's PodDisruptionBudget, when the scenario asks for one."""
    if job.pdb_min_available is None:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": {
            "minAvailable": job.pdb_min_available,
            "selector": {"matchLabels": {JOBSET_LABEL: job.name}},
        },
    }


def note_gang(gangs: list[frozenset[str]], pods: list[dict[str, Any]], size: int) -> None:
    """A whole new gang running (no pod of the previous one) is a restart, whichever way it was done:
    the JobSet's own counter misses a suspend/resume toggle, which recreates every pod just the same."""
    uids = frozenset(str(pod["metadata"]["uid"]) for pod in pods)
    if len(uids) == size and (not gangs or not uids & gangs[-1]):
        gangs.append(uids)


def pods_per_node(pods: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Workload pods per node: bound, not terminating, Pending or Running."""
    counts: dict[str, int] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if (
            node
            and "deletionTimestamp" not in pod["metadata"]
            and (pod.get("status") or {}).get("phase") in ("Pending", "Running")
        ):
            counts[node] = counts.get(node, 0) + 1
    return counts


def node_view(node: dict[str, Any], pods: dict[str, int]) -> NodeView:
    """What the scenario sees of a Node object (``pods``: :func:`pods_per_node`)."""
    metadata = node["metadata"]
    name = str(metadata["name"])
    taint = next((t for t in node["spec"].get("taints") or [] if t.get("key") == TAINT_KEY), None)
    ours = (metadata.get("annotations") or {}).get(CORDONED_ANNOTATION) == "true"
    return NodeView(
        name=name,
        state=(metadata.get("labels") or {}).get(STATE_LABEL),
        taint=str(taint.get("value") or "") if taint is not None else None,
        cordoned=bool(node["spec"].get("unschedulable")) and ours,
        workload_pods=pods.get(name, 0),
    )


@dataclass(frozen=True)
class KubeConnector:
    """Agents in another process reach the API server at ``url`` with ``token`` (one client per process)."""

    url: str
    token: str

    def agent_builder(self) -> Callable[[AgentSettings, NvmlLibrary], Agent]:
        api_client = shared_client(self.url, self.token)
        return lambda settings, library: kube_agent(settings, library, api_client)


class KubernetesOrchestrator:
    """``sim.kube`` (API server, scheduler, kubelet, Job/JobSet/disruption controllers) on real time."""

    kind = "kubernetes"

    def __init__(self) -> None:
        self._sim: KubeSim | None = None
        self._workloads = Workloads()
        self._gpus = 8
        self._gangs: list[frozenset[str]] = []  # the training job's pod UIDs, one set per gang seen running
        self._client: client.ApiClient | None = None
        self._kubelets: list[PodResourcesServer] = []  # PodResources per node, for a partial drain

    @property
    def sim(self) -> KubeSim:
        if self._sim is None:
            raise RuntimeError("the orchestrator is not started")
        return self._sim

    def start(self, nodes: int, gpus_per_node: int) -> list[str]:
        self._gpus = gpus_per_node
        # Few bookmarks: with a thousand node watches open, frequent bookmarks alone would keep a core busy.
        self._sim = KubeSim(clock=RealClock(), workloads=True, bookmark_interval_s=30.0).start()
        return build_fleet(self._sim.store, nodes, gpus_per_node=gpus_per_node)

    def stop(self) -> None:
        for kubelet in self._kubelets:
            kubelet.stop()
        self._kubelets.clear()
        if self._client is not None:
            shared: Any = self._client  # the client's close() carries no annotations
            shared.close()
            self._client = None
        if self._sim is not None:
            self._sim.stop()
            self._sim = None

    def build_agent(self, settings: AgentSettings, library: NvmlLibrary) -> Agent:
        if settings.policy.partial_drain and isinstance(library, FakeNvml):
            # The node's kubelet: which pod holds which of its fake GPUs, on the socket the agent reads.
            socket = settings.kubernetes.pod_resources_socket
            Path(socket).parent.mkdir(parents=True, exist_ok=True)
            server = PodResourcesServer(self.sim.store, settings.node_name, library.gpu_uuids, socket)
            self._kubelets.append(server.start())
        return kube_agent(settings, library, self._shared_client())

    def connector(self) -> KubeConnector:
        return KubeConnector(self.sim.url, DUMMY_TOKEN)

    def central_remediator(self, workdir: Path) -> dict[str, Any]:
        """The aggregator's ``remediator:`` section: drains on the emulator with a kubeconfig of its own
        (the aggregator's ServiceAccount in a cluster)."""
        kubeconfig = write_kubeconfig(workdir / "remediator.kubeconfig", self.sim.url)
        return {
            "orchestrator": "kubernetes",
            "kubeconfig": str(kubeconfig),
            "name": "demo-remediator",
            "poll_s": 0.1,
            "drain": DEMO_DRAIN.model_dump(mode="json"),
        }

    def _shared_client(self) -> client.ApiClient:
        if self._client is None:
            self._client = shared_client(self.sim.url, DUMMY_TOKEN)
        return self._client

    # --- workloads -------------------------------------------------------------------------------------

    def start_workloads(self, workloads: Workloads, timeout_s: float) -> None:
        self._workloads = workloads
        store = self.sim.store
        store.create("namespaces", {"metadata": {"name": workloads.namespace}})
        expected = 0
        if workloads.training is not None:
            self._create_training(workloads.training)
            expected += workloads.training.nodes
        if workloads.inference is not None:
            self._create_inference(workloads.inference)
            expected += workloads.inference.replicas
        deadline = time.monotonic() + timeout_s
        while len(self._running_pods()) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self._running_pods())} of {expected} workload pods run")
            time.sleep(POLL_S)
        self.job()  # the first gang, so that a later one counts as a restart

    def _create_training(self, job: TrainingJob) -> None:
        namespace = self._workloads.namespace
        pdb = training_pdb(job, namespace)
        if pdb is not None:
            self.sim.store.create(PDB_KEY, pdb)
        self.sim.store.create(JOBSET_KEY, training_jobset(job, namespace, self._gpus))

    def _create_inference(self, service: InferenceService) -> None:
        # A Job whose pods keep running stands in for a Deployment: the emulator runs Jobs, not ReplicaSets,
        # and a Job replaces an evicted pod just as a ReplicaSet would.
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": service.name, "namespace": self._workloads.namespace},
            "spec": {
                "parallelism": service.replicas,
                "completions": service.replicas,
                "template": {"spec": pod_spec(service.gpus)},
            },
        }
        self.sim.store.create("jobs.batch", body)

    # --- reading back ----------------------------------------------------------------------------------

    def _committed(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The stored objects themselves, shared and read only: the expectations look every 0.25 s, and a
        deep copy of a thousand nodes per look starved the timeline of a large fleet."""
        _, entries = self.sim.store.snapshot(resource, namespace)
        return [entry.obj for entry in entries]

    def _running_pods(self, **labels: str) -> list[dict[str, Any]]:
        return running_pods(self._committed("pods", self._workloads.namespace), labels)

    def _role_labels(self, role: Role) -> dict[str, str] | None:
        if role == "training" and self._workloads.training is not None:
            return {JOBSET_LABEL: self._workloads.training.name}
        if role == "inference" and self._workloads.inference is not None:
            return {JOB_LABEL: self._workloads.inference.name}
        return None

    def role_nodes(self, role: Role) -> list[str]:
        if role == "idle":
            busy = {pod["spec"].get("nodeName") for pod in self._running_pods()}
            return sorted(name for name in self._node_names() if name not in busy)
        labels = self._role_labels(role)
        if labels is None:
            return []
        return sorted({str(pod["spec"]["nodeName"]) for pod in self._running_pods(**labels)})

    def _node_names(self) -> list[str]:
        return sorted(str(node["metadata"]["name"]) for node in self._committed("nodes"))

    def node(self, name: str) -> NodeView:
        found = self.sim.store.get_entry("nodes", None, name)
        if found is None:
            raise LookupError(f"no node {name}")
        return self._view(found.obj, self._pods_per_node())

    def tainted(self, names: Iterable[str]) -> set[str]:
        tainted = set()
        for name in names:
            found = self.sim.store.get_entry("nodes", None, name)
            taints = found.obj["spec"].get("taints") or [] if found is not None else []
            if any(t.get("key") == TAINT_KEY for t in taints):
                tainted.add(name)
        return tainted

    def nodes(self) -> list[NodeView]:
        per_node = self._pods_per_node()
        views = [self._view(node, per_node) for node in self._committed("nodes")]
        return sorted(views, key=lambda view: view.name)

    def _pods_per_node(self) -> dict[str, int]:
        return pods_per_node(self._committed("pods", self._workloads.namespace))

    _view = staticmethod(node_view)

    def job(self) -> JobView | None:
        training = self._workloads.training
        if training is None:
            return None
        jobset = self.sim.store.get(JOBSET_KEY, self._workloads.namespace, training.name)
        counted = int(((jobset or {}).get("status") or {}).get("restarts") or 0)
        pods = self._running_pods(**{JOBSET_LABEL: training.name})
        note_gang(self._gangs, pods, training.nodes)
        return JobView(
            restarts=max(counted, len(self._gangs) - 1),
            running_nodes=tuple(sorted(str(pod["spec"]["nodeName"]) for pod in pods)),
            expected_pods=training.nodes,
        )

    def api_outage(self, seconds: float) -> None:
        self.sim.faults.outage(seconds)
