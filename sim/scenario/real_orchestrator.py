"""The real Kubernetes side of a scenario (``gpuhealth demo --cluster real``): a control plane on this
machine, built from the Go modules by ``tools/build-control-plane.sh`` (``sim.realkube``).

etcd, kube-apiserver and kube-controller-manager (Job, Deployment, disruption, node lifecycle ...),
kube-scheduler placing every pod, KWOK running the GPU nodes (Ready, Lease heartbeats, graceful pod
deletion that keeps ``DisruptionTarget``), and the real JobSet manager with its webhooks for the training
job, which restarts itself on an evicted pod's ``DisruptionTarget`` (its failure policy; sim/README.md says
why it is not left to the suspend toggle here). The agents (real, on fake GPUs) talk to the API server over
HTTPS with the plane's CA; the aggregator's central remediator drains through it with its own client
certificate. What the agents and the controllers did is read back through a watch of the nodes and of the
workloads' pods (what an operator's tool would hold), never from a store of ours.

What does not play here (:func:`check_real_playable`): an API outage (the real API server is not ours to
switch off and on in the middle of a story) and a partial drain (it reads the kubelet's PodResources
socket, which a KWOK node does not serve).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from remediation.kubernetes.names import TAINT_KEY
from sim.realkube.control_plane import ControlPlane, ControlPlaneUnavailable, find_binaries
from sim.realkube.nodes import create_kwok_nodes, wait_schedulable
from sim.realkube.stack import find_stack, how_to_build, kubectl
from sim.scenario.agents import DEMO_DRAIN
from sim.scenario.kube_orchestrator import (
    JOBSET_LABEL,
    SHARED_POOL_CONNECTIONS,
    kube_agent,
    node_view,
    note_gang,
    pod_spec,
    pods_per_node,
    running_pods,
    training_jobset,
    training_pdb,
)
from sim.scenario.model import (
    ApiOutageFault,
    InferenceService,
    Role,
    Scenario,
    TrainingJob,
    Workloads,
    node_name,
)
from sim.scenario.orchestrator import JobView, NodeView

log = structlog.get_logger(__name__)

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
INFERENCE_LABEL = "gpuhealth.io/demo-inference"
REMEDIATOR_USER = "gpuhealth:demo-remediator"
NODES_READY_S = 120.0  # hang guard: KWOK makes a node Ready within seconds
WATCH_TIMEOUT_S = 60  # a watch is renewed this often (and at once after an error)
SYNC_TIMEOUT_S = 30.0
STOP_JOIN_S = 5.0


def check_real_playable(scenario: Scenario) -> None:
    """Raises ControlPlaneUnavailable (one line) when the scenario cannot play on the real stack: not a
    Kubernetes scenario, a fault or setting the real stack cannot play, or a component not built."""
    if scenario.orchestrator != "kubernetes":
        raise ControlPlaneUnavailable(
            f"the real stack is Kubernetes; this scenario is for {scenario.orchestrator}"
        )
    if any(isinstance(injection.fault, ApiOutageFault) for injection in scenario.timeline):
        raise ControlPlaneUnavailable(
            "an API outage is played on the emulator only (the real API server is not switched off)"
        )
    if scenario.fleet.agent.partial_drain:
        raise ControlPlaneUnavailable(
            "a partial drain reads the kubelet's PodResources socket, which KWOK nodes do not serve"
        )
    find_binaries()
    stack = find_stack()
    needed = ["kube-scheduler", "kwok"] + (["jobset"] if scenario.workloads.training is not None else [])
    for name in needed:
        if name not in stack:
            raise ControlPlaneUnavailable(how_to_build(name))
    if scenario.workloads.training is not None:
        try:
            kubectl()  # renders the JobSet manager's manifests (kustomize)
        except RuntimeError as exc:
            raise ControlPlaneUnavailable(str(exc)) from None


@dataclass(frozen=True)
class RealKubeConnector:
    """Agents in another process reach the real API server at ``url`` (HTTPS, ``ca_file``) with
    ``token``; one shared API client per process (``SHARED_POOL_CONNECTIONS``)."""

    url: str
    token: str
    ca_file: str

    def api_client(self) -> client.ApiClient:
        bearer = {"authorization": f"Bearer {self.token}"}
        configuration = client.Configuration(host=self.url, api_key=bearer, ssl_ca_cert=self.ca_file)
        configuration.connection_pool_maxsize = SHARED_POOL_CONNECTIONS
        return client.ApiClient(configuration)

    def agent_builder(self) -> Callable[[AgentSettings, NvmlLibrary], Agent]:
        api_client = self.api_client()
        return lambda settings, library: kube_agent(settings, library, api_client)


class _Mirror:
    """A list-and-watch copy of one kind of object (nodes, or the pods of a namespace), as an informer
    keeps it: reads come from here, every change arrives within the watch's latency."""

    def __init__(self, api: client.ApiClient, what: str, namespace: str | None = None) -> None:
        self._core = client.CoreV1Api(api)
        self._what = what
        self._namespace = namespace
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name=f"real-{what}", daemon=True)

    def start(self) -> _Mirror:
        self._thread.start()
        if not self._synced.wait(SYNC_TIMEOUT_S):
            raise TimeoutError(f"the watch of {self._what} never listed")
        return self

    def stop(self) -> None:
        """Ask the watch to end; it does at its next event or when the API server goes (:meth:`join`)."""
        self._stopping.set()
        if self._watch is not None:
            self._watch.stop()

    def join(self) -> None:
        self._thread.join(STOP_JOIN_S)

    def objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(name)

    def _lister(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if self._what == "nodes":
            return self._core.list_node, ()
        return self._core.list_namespaced_pod, (self._namespace,)

    def _run(self) -> None:
        lister, args = self._lister()
        while not self._stopping.is_set():
            try:
                self._follow(lister, args)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stopping.is_set():
                    return
                log.warning("real_watch_restarted", what=self._what, error=str(exc)[:200])
                time.sleep(0.5)

    def _follow(self, lister: Callable[..., Any], args: tuple[Any, ...]) -> None:
        listed = lister(*args, _preload_content=False)
        document = json.loads(listed.data)
        with self._lock:
            self._objects = {item["metadata"]["name"]: item for item in document["items"]}
        self._synced.set()
        version = document["metadata"]["resourceVersion"]
        while not self._stopping.is_set():
            self._watch = watch.Watch()
            for event in self._watch.stream(
                lister, *args, resource_version=version, timeout_seconds=WATCH_TIMEOUT_S
            ):
                raw = event["raw_object"]
                if event["type"] == "ERROR":
                    raise ValueError(f"watch error: {raw.get('message')}")
                version = raw["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    continue
                with self._lock:
                    if event["type"] == "DELETED":
                        self._objects.pop(raw["metadata"]["name"], None)
                    else:
                        self._objects[raw["metadata"]["name"]] = raw
                if self._stopping.is_set():
                    return


class RealKubeOrchestrator:
    """A real control plane with KWOK GPU nodes, kube-scheduler and the JobSet manager; see the module."""

    kind = "kubernetes"

    def __init__(self) -> None:
        self._plane: ControlPlane | None = None
        self._client: client.ApiClient | None = None
        self._agents_client: client.ApiClient | None = None
        self._nodes: _Mirror | None = None
        self._pods: _Mirror | None = None
        self._workloads = Workloads()
        self._gpus = 8
        self._gangs: list[frozenset[str]] = []

    @property
    def plane(self) -> ControlPlane:
        if self._plane is None:
            raise RuntimeError("the orchestrator is not started")
        return self._plane

    @property
    def api(self) -> client.ApiClient:
        if self._client is None:
            raise RuntimeError("the orchestrator is not started")
        return self._client

    def start(self, nodes: int, gpus_per_node: int) -> list[str]:
        self._gpus = gpus_per_node
        self._plane = ControlPlane(find_binaries()).start()
        if not (self._plane.scheduler and self._plane.kwok):
            raise ControlPlaneUnavailable(
                how_to_build("kube-scheduler" if not self._plane.scheduler else "kwok")
            )
        configuration = self._plane.configuration()  # the admin's
        configuration.connection_pool_maxsize = SHARED_POOL_CONNECTIONS  # two watches and the reads
        self._client = client.ApiClient(configuration)
        names = [node_name(index, nodes) for index in range(nodes)]
        create_kwok_nodes(self._client, names, gpus_per_node)
        wait_schedulable(self._client, names, NODES_READY_S)
        self._nodes = _Mirror(self._client, "nodes").start()
        return names

    def stop(self) -> None:
        mirrors = [mirror for mirror in (self._pods, self._nodes) if mirror is not None]
        for mirror in mirrors:
            mirror.stop()
        self._pods = self._nodes = None
        for each in (self._agents_client, self._client):
            if each is not None:
                closing: Any = each  # the client's close() carries no annotations
                closing.close()
        self._agents_client = self._client = None
        if self._plane is not None:
            self._plane.stop()  # a watch waiting for its next event ends with the API server
            self._plane = None
        for mirror in mirrors:
            mirror.join()

    def connector(self) -> RealKubeConnector:
        return RealKubeConnector(self.plane.url, self.plane.admin_token, str(self.plane.ca_file))

    def build_agent(self, settings: AgentSettings, library: NvmlLibrary) -> Agent:
        if self._agents_client is None:
            self._agents_client = self.connector().api_client()
        return kube_agent(settings, library, self._agents_client)

    def central_remediator(self, workdir: Path) -> dict[str, Any]:
        """The aggregator's ``remediator:`` section: drains through the real API server with a client
        certificate of its own (a cluster's aggregator has its ServiceAccount)."""
        kubeconfig = self.plane.write_kubeconfig(
            workdir / "remediator.kubeconfig", user=REMEDIATOR_USER, groups=("system:masters",)
        )
        return {
            "orchestrator": "kubernetes",
            "kubeconfig": str(kubeconfig),
            "name": "demo-remediator",
            "poll_s": 0.1,
            "drain": DEMO_DRAIN.model_dump(mode="json"),
        }

    # --- workloads -------------------------------------------------------------------------------------

    def start_workloads(self, workloads: Workloads, timeout_s: float) -> None:
        self._workloads = workloads
        labels: dict[str, str] = {}
        if workloads.training is not None:
            labels.update(self.plane.controller("jobset").namespace_label)
        core: Any = client.CoreV1Api(self.api)  # dict bodies go out as they are
        core.create_namespace({"metadata": {"name": workloads.namespace, "labels": labels}})
        self._pods = _Mirror(self.api, "pods", workloads.namespace).start()
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
            time.sleep(0.1)
        self.job()  # the first gang, so that a later one counts as a restart

    def _create_training(self, job: TrainingJob) -> None:
        namespace = self._workloads.namespace
        pdb = training_pdb(job, namespace)
        if pdb is not None:
            policy: Any = client.PolicyV1Api(self.api)  # dict bodies go out as they are
            policy.create_namespaced_pod_disruption_budget(namespace, pdb)
        custom: Any = client.CustomObjectsApi(self.api)
        custom.create_namespaced_custom_object(
            *JOBSET[:2],
            namespace,
            JOBSET[2],
            # The JobSet restarts itself on the eviction (see sim/README.md: with the suspend toggle the
            # real Job controller's 10 s backoff keeps the gang pending while the story goes on).
            training_jobset(job, namespace, self._gpus, restart_on_eviction=True),
        )

    def _create_inference(self, service: InferenceService) -> None:
        # The real thing: a Deployment (the emulator stands a long-running Job in for it).
        labels = {INFERENCE_LABEL: service.name}
        spec = pod_spec(service.gpus)
        spec["restartPolicy"] = "Always"  # a Deployment's pods are restarted in place
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": service.name, "namespace": self._workloads.namespace},
            "spec": {
                "replicas": service.replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
        apps: Any = client.AppsV1Api(self.api)
        apps.create_namespaced_deployment(self._workloads.namespace, body)

    # --- reading back ----------------------------------------------------------------------------------

    def _all_pods(self) -> list[dict[str, Any]]:
        return self._pods.objects() if self._pods is not None else []

    def _node_objects(self) -> list[dict[str, Any]]:
        return self._nodes.objects() if self._nodes is not None else []

    def _running_pods(self, **labels: str) -> list[dict[str, Any]]:
        return running_pods(self._all_pods(), labels)

    def _role_labels(self, role: Role) -> dict[str, str] | None:
        if role == "training" and self._workloads.training is not None:
            return {JOBSET_LABEL: self._workloads.training.name}
        if role == "inference" and self._workloads.inference is not None:
            return {INFERENCE_LABEL: self._workloads.inference.name}
        return None

    def role_nodes(self, role: Role) -> list[str]:
        if role == "idle":
            busy = {pod["spec"].get("nodeName") for pod in self._running_pods()}
            names = (str(node["metadata"]["name"]) for node in self._node_objects())
            return sorted(name for name in names if name not in busy)
        labels = self._role_labels(role)
        if labels is None:
            return []
        return sorted({str(pod["spec"]["nodeName"]) for pod in self._running_pods(**labels)})

    def node(self, name: str) -> NodeView:
        found = self._nodes.get(name) if self._nodes is not None else None
        if found is None:
            raise LookupError(f"no node {name}")
        return node_view(found, pods_per_node(self._all_pods()))

    def nodes(self) -> list[NodeView]:
        per_node = pods_per_node(self._all_pods())
        return sorted((node_view(n, per_node) for n in self._node_objects()), key=lambda v: v.name)

    def tainted(self, names: Iterable[str]) -> set[str]:
        found = set()
        for name in names:
            node = self._nodes.get(name) if self._nodes is not None else None
            if node is not None and any(t.get("key") == TAINT_KEY for t in node["spec"].get("taints") or []):
                found.add(name)
        return found

    def job(self) -> JobView | None:
        training = self._workloads.training
        if training is None:
            return None
        counted = 0
        with contextlib.suppress(ApiException):  # gone or not yet there: no restarts counted by it
            custom: Any = client.CustomObjectsApi(self.api)
            jobset = custom.get_namespaced_custom_object(
                *JOBSET[:2], self._workloads.namespace, JOBSET[2], training.name
            )
            counted = int((jobset.get("status") or {}).get("restarts") or 0)
        pods = self._running_pods(**{JOBSET_LABEL: training.name})
        note_gang(self._gangs, pods, training.nodes)
        return JobView(
            restarts=max(counted, len(self._gangs) - 1),
            running_nodes=tuple(sorted(str(pod["spec"]["nodeName"]) for pod in pods)),
            expected_pods=training.nodes,
        )

    def api_outage(self, seconds: float) -> None:
        raise ControlPlaneUnavailable(
            f"an API outage of {seconds:g} s is played on the emulator only (check_real_playable refuses it)"
        )
