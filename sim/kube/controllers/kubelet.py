"""The kubelets of every node, plus the node lifecycle and pod garbage collection they lean on.

Follows "Pod Lifecycle" (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/): a bound pod on
a Ready node starts (phase Running, conditions PodScheduled, Initialized, ContainersReady, Ready True,
``startTime``, container statuses, host and pod IPs); a deleted pod is stopped after its grace period and
is first moved to a terminal phase ("the kubelet transitions deleted pods ... to a terminal phase"), then
removed unless finalizers hold it. A node that is not Ready runs nothing new and its pods turn not Ready
(the node lifecycle controller's "MarkPodsNotReady"); pods stuck terminating there stay until the node
comes back, is tainted ``node.kubernetes.io/out-of-service`` or disappears ("Non-graceful node
shutdown", pod garbage collection).

Simulated work: annotation ``sim.gpuhealth.io/run-seconds`` makes the containers exit 0 that many
seconds after they started; ``sim.gpuhealth.io/fail-after`` makes them exit with
``sim.gpuhealth.io/exit-code`` (default 1). ``restartPolicy`` decides whether they restart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sim.kube.controllers.cache import cache_for
from sim.kube.controllers.common import (
    condition,
    format_time,
    is_terminal,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    node_ready_status,
    phase_of,
    set_condition,
    try_update,
    uid_of,
    writable,
)
from sim.kube.protocols import KubeObject, ObjectStore

RUN_SECONDS = "sim.gpuhealth.io/run-seconds"
FAIL_AFTER = "sim.gpuhealth.io/fail-after"
EXIT_CODE = "sim.gpuhealth.io/exit-code"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
_KILLED_EXIT_CODE = 137  # SIGKILL at the end of the grace period
_RUNNING_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")


def parse_time(text: str) -> datetime:
    """An API timestamp (RFC 3339, UTC ``Z``) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ip_for(seed: str, first_octet: int) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return f"{first_octet}.{digest[0]}.{digest[1]}.{max(digest[2], 1)}"


def _node_ip(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return _ip_for(name_of(node), 192)


def _annotation_seconds(pod: Mapping[str, Any], key: str) -> float | None:
    value = (meta(pod).get("annotations") or {}).get(key)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _container_id(pod: Mapping[str, Any], name: str, restarts: int) -> str:
    digest = hashlib.sha256(f"{uid_of(pod)}/{name}/{restarts}".encode()).hexdigest()
    return f"containerd://{digest}"


class Kubelet:
    """Starts bound pods, runs their simulated work, and finishes graceful deletions."""

    name = "kubelet"

    def reconcile(self, store: ObjectStore) -> None:
        """Move every bound pod one step along its lifecycle."""
        cache = cache_for(store)
        bound = [p for p in cache.list("pods") if (p.get("spec") or {}).get("nodeName")]
        if not bound:
            return
        nodes = {name_of(node): node for node in cache.list("nodes")}
        now = store.clock.now()
        for pod in bound:
            node = nodes.get(str(pod["spec"]["nodeName"]))
            if is_terminating(pod):
                self._terminate(store, pod, node, now)
            elif node is None or is_terminal(pod):
                continue
            elif node_ready_status(node) != "True":
                self._mark_not_ready(store, pod)
            elif phase_of(pod) == "Pending":
                self._start(store, pod, node)
            else:
                self._run(store, pod, now)

    # --- starting and running -----------------------------------------------------------------------

    def _start(self, store: ObjectStore, pod: KubeObject, node: KubeObject) -> None:
        now = format_time(store)
        started = writable(pod)
        status = started.setdefault("status", {})
        host_ip = _node_ip(node)
        pod_ip = host_ip if (pod.get("spec") or {}).get("hostNetwork") else _ip_for(uid_of(pod), 10)
        status.update(
            phase="Running",
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            podIP=pod_ip,
            podIPs=[{"ip": pod_ip}],
            startTime=status.get("startTime") or now,
            containerStatuses=[_running_status(pod, c, 0, now) for c in _containers(pod)],
        )
        for kind in _RUNNING_CONDITIONS:
            set_condition(status, {"type": kind, "status": "True", "lastProbeTime": None}, now)
        try_update(store, "pods", started)

    def _run(self, store: ObjectStore, pod: KubeObject, now: datetime) -> None:
        ready = condition(pod, "Ready")
        if ready is not None and ready.get("status") != "True":
            self._set_ready(store, pod, True)  # the node is back: containers are still running
            return
        exit_code = self._due_exit(pod, now)
        if exit_code is None:
            return
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            self._restart(store, pod, exit_code)
        else:
            self._finish(store, pod, exit_code)

    @staticmethod
    def _due_exit(pod: KubeObject, now: datetime) -> int | None:
        """The exit code of the simulated work once its time has come, else None."""
        started = _last_start(pod)
        if started is None:
            return None
        elapsed = (now - started).total_seconds()
        fail_after = _annotation_seconds(pod, FAIL_AFTER)
        if fail_after is not None and elapsed >= fail_after:
            return int(_annotation_seconds(pod, EXIT_CODE) or 1)
        run_seconds = _annotation_seconds(pod, RUN_SECONDS)
        if run_seconds is not None and elapsed >= run_seconds:
            return 0
        return None

    def _restart(self, store: ObjectStore, pod: KubeObject, exit_code: int) -> None:
        now = format_time(store)
        restarted = writable(pod)
        statuses = []
        for old in (pod.get("status") or {}).get("containerStatuses") or []:
            count = int(old.get("restartCount") or 0) + 1
            fresh = _running_status(pod, {"name": old.get("name"), "image": old.get("image")}, count, now)
            fresh["lastState"] = {"terminated": _terminated(old, exit_code, now)}
            statuses.append(fresh)
        restarted["status"]["containerStatuses"] = statuses
        try_update(store, "pods", restarted)

    def _finish(self, store: ObjectStore, pod: KubeObject, exit_code: int) -> None:
        finished = writable(pod)
        _make_terminal(finished, exit_code, format_time(store))
        try_update(store, "pods", finished)

    def _mark_not_ready(self, store: ObjectStore, pod: KubeObject) -> None:
        ready = condition(pod, "Ready")
        if phase_of(pod) == "Running" and ready is not None and ready.get("status") == "True":
            self._set_ready(store, pod, False)

    @staticmethod
    def _set_ready(store: ObjectStore, pod: KubeObject, ready: bool) -> None:
        updated = writable(pod)
        status = updated.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        new = {"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None}
        if not ready:
            new["reason"] = "NodeNotReady"
        set_condition(status, new, format_time(store))
        for container in status.get("containerStatuses") or []:
            container["ready"] = ready
        try_update(store, "pods", updated)

    # --- termination ---------------------------------------------------------------------------------

    def _terminate(self, store: ObjectStore, pod: KubeObject, node: KubeObject | None, now: datetime) -> None:
        if node is not None and node_ready_status(node) != "True" and not _out_of_service(node):
            return  # no kubelet answers: the pod stays Terminating
        deadline = parse_time(str(meta(pod)["deletionTimestamp"]))
        never_ran = phase_of(pod) == "Pending" and not (pod.get("status") or {}).get("containerStatuses")
        if now < deadline and not never_ran and not is_terminal(pod) and node is not None:
            return
        if not is_terminal(pod):
            stopped = writable(pod)
            _make_terminal(stopped, _KILLED_EXIT_CODE, format_time(store))
            pod = try_update(store, "pods", stopped) or pod
        if not meta(pod).get("finalizers"):
            store.delete("pods", namespace_of(pod), name_of(pod))


def _out_of_service(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints)


def _last_start(pod: Mapping[str, Any]) -> datetime | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
        if started:
            return parse_time(str(started))
    return None


def _running_status(
    pod: Mapping[str, Any], container: Mapping[str, Any], restarts: int, now: str
) -> dict[str, Any]:
    name = str(container.get("name"))
    return {
        "name": name,
        "image": container.get("image"),
        "imageID": f"sim.gpuhealth.io/{container.get('image')}",
        "containerID": _container_id(pod, name, restarts),
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": now}},
    }


def _terminated(old: Mapping[str, Any], exit_code: int, now: str) -> dict[str, Any]:
    started = ((old.get("state") or {}).get("running") or {}).get("startedAt")
    return {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started,
        "finishedAt": now,
        "containerID": old.get("containerID"),
    }


def _make_terminal(pod: KubeObject, exit_code: int, now: str) -> None:
    """Containers exit with ``exit_code``: the pod is Succeeded on 0, Failed otherwise, and not Ready."""
    status = pod.setdefault("status", {})
    succeeded = exit_code == 0
    status["phase"] = "Succeeded" if succeeded else "Failed"
    statuses = status.get("containerStatuses") or []
    for container in statuses:
        if "running" in (container.get("state") or {}):
            container["state"] = {"terminated": _terminated(container, exit_code, now)}
        container["ready"] = False
        container["started"] = False
    reason = "PodCompleted" if succeeded else "PodFailed"
    for kind in ("Ready", "ContainersReady"):
        set_condition(status, {"type": kind, "status": "False", "reason": reason, "lastProbeTime": None}, now)
