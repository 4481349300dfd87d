"""Hand-written kubelets for the real control plane of ``control_plane.py``, for the tests that need a
kubelet's own identity or its silence (KWOK runs every other node; docs/testing.md says why these stay).

There is no container runtime, so a :class:`FakeKubelets` plays the kubelet of each of its GPU nodes, with
that node's own identity (``system:node:<name>`` in ``system:nodes``: the Node authorizer and the
NodeRestriction admission plugin judge every request it makes, as they would a real kubelet's):

- registers the Node (GPU-operator labels, ``nvidia.com/gpu`` capacity, Ready) and its Lease in
  ``kube-node-lease``, renews the Lease every 10 s and posts the Ready condition every 5 minutes (the
  kubelet's defaults), so the node lifecycle controller never finds the nodes unhealthy;
- watches the pods bound to its node (``fieldSelector=spec.nodeName=<node>``) and marks each Running and
  Ready at once;
- finishes graceful deletion: a pod with a ``deletionTimestamp`` is moved to phase Failed (its containers
  terminated with exit code 137, the conditions it has, such as ``DisruptionTarget``, kept), then deleted
  with grace period 0, as a kubelet does once the containers have stopped.

kube-scheduler places the pods (there is no stand-in scheduler any more).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from control_plane import ControlPlane
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from sim.kube.fleet import gpu_node

log = structlog.get_logger("fake_kubelet")

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
STATUS_REPORT_S = 300.0
WATCH_TIMEOUT_S = 30
GPU = "nvidia.com/gpu"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeKubelets:
    """The kubelets of ``nodes``; see the module docstring."""

    def __init__(
        self,
        plane: ControlPlane,
        nodes: Iterable[str],
        *,
        gpus: int = 8,
        node_labels: dict[str, str] | None = None,
    ) -> None:
        self.plane = plane
        self.nodes = list(nodes)
        self.gpus = gpus
        self.node_labels = node_labels or {}
        self.stopping = threading.Event()
        self.admin = plane.api_client()
        self.core = client.CoreV1Api(self.admin)
        self._node_clients = {node: plane.node_client(node) for node in self.nodes}
        self._threads: list[threading.Thread] = []
        self._streams: set[watch.Watch] = set()
        self.silent: set[str] = set()  # nodes whose kubelet stopped posting (a dead node)
        self.errors: list[str] = []

    # --- start / stop ----------------------------------------------------------------------------------

    def start(self) -> FakeKubelets:
        for node in self.nodes:
            self._register(node)
        for node in self.nodes:
            self._thread(f"kubelet-{node}", lambda node=node: self._run_pods(node))  # type: ignore[misc]
        self._thread("kubelet-heartbeats", self._run_heartbeats)
        return self

    def stop(self, *, delete_nodes: bool = True) -> None:
        self.stopping.set()
        for stream in list(self._streams):  # ends a blocked read at once rather than at its timeout
            response = getattr(stream, "_resp", None)
            if response is not None:
                with contextlib.suppress(Exception):
                    response.shutdown() if hasattr(response, "shutdown") else response.close()
        for thread in self._threads:
            thread.join(5.0)
        if delete_nodes:
            for node in self.nodes:
                with contextlib.suppress(ApiException):
                    self.core.delete_node(node)
                with contextlib.suppress(ApiException):
                    client.CoordinationV1Api(self.admin).delete_namespaced_lease(node, "kube-node-lease")
        for api_client in self._node_clients.values():
            api_client.close()
        self.admin.close()

    def _thread(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # a test helper's thread must not die silently (logged with exception)
                if not self.stopping.is_set():
                    self.errors.append(f"{name}: {exc!r}")
                    log.exception("fake_kubelet_thread_failed", thread=name)

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # --- node registration and heartbeats ----------------------------------------------------------------

    def _register(self, node: str) -> None:
        core = client.CoreV1Api(self._node_clients[node])
        body = gpu_node(node, gpus=self.gpus, labels=self.node_labels, heartbeat=now())
        status = body.pop("status")
        created = core.create_node(body)
        core.patch_node_status(node, {"status": status})
        lease = {
            "metadata": {
                "name": node,
                "namespace": "kube-node-lease",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node, "uid": created.metadata.uid}
                ],
            },
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": now_micro(),
            },
        }
        client.CoordinationV1Api(self._node_clients[node]).create_namespaced_lease("kube-node-lease", lease)

    def _run_heartbeats(self) -> None:
        last_status = dt.datetime.now(dt.UTC)
        while not self.stopping.wait(LEASE_RENEW_S):
            report_status = (dt.datetime.now(dt.UTC) - last_status).total_seconds() >= STATUS_REPORT_S
            for node in self.nodes:
                if node in self.silent:
                    continue
                api_client = self._node_clients[node]
                with contextlib.suppress(ApiException):
                    client.CoordinationV1Api(api_client).patch_namespaced_lease(
                        node, "kube-node-lease", {"spec": {"renewTime": now_micro()}}
                    )
                if report_status:
                    ready = {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now(),
                    }
                    with contextlib.suppress(ApiException):
                        client.CoreV1Api(api_client).patch_node_status(
                            node, {"status": {"conditions": [ready]}}
                        )
            if report_status:
                last_status = dt.datetime.now(dt.UTC)

    # --- pods ------------------------------------------------------------------------------------------------

    def _watch(
        self,
        api_client: client.ApiClient,
        field_selector: str,
        handle: Callable[[dict[str, Any]], None],
        *,
        resync_s: int = WATCH_TIMEOUT_S,
    ) -> None:
        """List, then watch from the list's version; relist every ``resync_s``, on 410 or a dropped stream,
        until stopped."""
        core = client.CoreV1Api(api_client)
        while not self.stopping.is_set():
            listed = api_client.sanitize_for_serialization(
                core.list_pod_for_all_namespaces(field_selector=field_selector)
            )
            for pod in listed.get("items") or []:
                handle(pod)
            version = listed["metadata"]["resourceVersion"]
            stream = watch.Watch()
            self._streams.add(stream)
            try:
                for event in stream.stream(
                    core.list_pod_for_all_namespaces,
                    field_selector=field_selector,
                    resource_version=version,
                    timeout_seconds=resync_s,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                ):
                    if self.stopping.is_set():
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(event["object"])
                    elif event["type"] == "ERROR":
                        break
            except Exception as exc:  # noqa: BLE001 (a dropped or shut-down stream: relist, or end when stopping)
                if self.stopping.is_set():
                    return
                log.debug("fake_kubelet_watch_restart", error=str(exc))
            finally:
                self._streams.discard(stream)
                stream.stop()

    def _run_pods(self, node: str) -> None:
        api_client = self._node_clients[node]
        self._watch(api_client, f"spec.nodeName={node}", lambda pod: self._sync_pod(api_client, pod))

    def _sync_pod(self, api_client: client.ApiClient, pod: dict[str, Any]) -> None:
        core = client.CoreV1Api(api_client)
        meta, status = pod["metadata"], pod.get("status") or {}
        name, namespace = meta["name"], meta["namespace"]
        try:
            if meta.get("deletionTimestamp"):
                if status.get("phase") not in ("Failed", "Succeeded"):
                    core.patch_namespaced_pod_status(name, namespace, self._terminated(pod))
                core.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                    ),
                )
            elif status.get("phase") in (None, "Pending"):
                core.patch_namespaced_pod_status(name, namespace, self._running(pod))
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("fake_kubelet_pod_sync_failed", pod=f"{namespace}/{name}", status=exc.status)

    @staticmethod
    def _running(pod: dict[str, Any]) -> dict[str, Any]:
        at = now()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": at}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        containers = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"fake://{pod['metadata']['uid']}/{c['name']}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": at}},
            }
            for c in pod["spec"].get("containers", [])
        ]
        return {
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": containers,
                "hostIP": "10.0.0.1",
                "podIP": "10.244.0.10",
                "startTime": at,
            }
        }

    @staticmethod
    def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
        at = now()
        containers = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"fake://{pod['metadata']['uid']}/{c['name']}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {"exitCode": 137, "reason": "Error", "startedAt": at, "finishedAt": at}
                },
            }
            for c in pod["spec"].get("containers", [])
        ]
        not_ready = [
            {"type": kind, "status": "False", "lastTransitionTime": at, "reason": "PodCompleted"}
            for kind in ("Ready", "ContainersReady")
        ]
        return {"status": {"phase": "Failed", "conditions": not_ready, "containerStatuses": containers}}
