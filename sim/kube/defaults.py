"""Defaults and initial status the API server fills in on create, for the kinds our code reads back.

Sources: the API reference's documented defaults for Pod, Job, DaemonSet, Namespace
(https://kubernetes.io/docs/reference/kubernetes-api/), the ``DefaultTolerationSeconds`` admission
plugin (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#defaulttolerationseconds),
"Pod Quality of Service Classes" (https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/) and the
Job controller's generated selector ("Jobs" → "Specifying your own Pod selector",
https://kubernetes.io/docs/concepts/workloads/controllers/job/#specifying-your-own-pod-selector).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from sim.kube.protocols import KubeObject

_DEFAULT_TOLERATION_SECONDS = 300
_NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _container_defaults(container: dict[str, Any]) -> None:
    image = str(container.get("image") or "")
    latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed when every container limits cpu and memory at its requests; BestEffort with none."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        any_set = any_set or bool(requests) or bool(limits)
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def _pod(pod: KubeObject) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        _container_defaults(container)
    tolerations = spec.setdefault("tolerations", [])
    for key in _NOT_READY_TAINTS:
        if not any(t.get("key") == key and t.get("effect") in (None, "NoExecute") for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": _DEFAULT_TOLERATION_SECONDS,
                }
            )


def _job(job: KubeObject) -> None:
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", None)
    if spec["manualSelector"] is None:
        spec.pop("manualSelector")
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    if not spec.get("manualSelector"):
        generated = {"batch.kubernetes.io/controller-uid": uid}
        spec["selector"] = {"matchLabels": generated}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        labels = template_meta.setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
    template_spec = spec.setdefault("template", {}).setdefault("spec", {})
    for container in template_spec.get("containers") or []:
        _container_defaults(container)


def _daemonset(daemonset: KubeObject) -> None:
    spec = daemonset.setdefault("spec", {})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    )


def _namespace(namespace: KubeObject) -> None:
    name = namespace["metadata"]["name"]
    namespace["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    namespace["spec"] = {"finalizers": ["kubernetes"]}


def _service(service: KubeObject) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")


_NODE_INFO_FIELDS = (
    "architecture",
    "bootID",
    "containerRuntimeVersion",
    "kernelVersion",
    "kubeProxyVersion",
    "kubeletVersion",
    "machineID",
    "operatingSystem",
    "osImage",
    "systemUUID",
)


def _node(node: KubeObject) -> None:
    node.setdefault("spec", {})
    status = node.setdefault("status", {})
    # Go serializes these structs even when empty, so real nodes always carry them.
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
    info = status.setdefault("nodeInfo", {})
    for name in _NODE_INFO_FIELDS:
        info.setdefault(name, "")


# Built-in kinds whose spec is a Go struct: the server always serializes it, if only as {}.
_STRUCT_SPEC = frozenset(
    {
        "pods",
        "nodes",
        "namespaces",
        "services",
        "daemonsets.apps",
        "jobs.batch",
        "poddisruptionbudgets.policy",
        "leases.coordination.k8s.io",
        "devicetaintrules.resource.k8s.io",
        "resourceslices.resource.k8s.io",
        "resourceclaims.resource.k8s.io",
    }
)


_ON_CREATE: dict[str, Callable[[KubeObject], None]] = {
    "nodes": _node,
    "pods": _pod,
    "jobs.batch": _job,
    "daemonsets.apps": _daemonset,
    "namespaces": _namespace,
    "services": _service,
}


_INITIAL_STATUS: dict[str, Callable[[KubeObject], dict[str, Any]]] = {
    "pods": lambda pod: {"phase": "Pending", "qosClass": qos_class(pod.get("spec") or {})},
    "namespaces": lambda _: {"phase": "Active"},
    "services": lambda _: {"loadBalancer": {}},
    "daemonsets.apps": lambda _: {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
    "poddisruptionbudgets.policy": lambda _: {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
    "jobs.batch": lambda _: {},
    "nodes": lambda _: {},
    "devicetaintrules.resource.k8s.io": lambda _: {},
}


def omit_empty(resource: str, obj: KubeObject) -> None:
    """Drop the zero values Go leaves out (``omitempty``) that clients commonly send: a Node's
    ``spec.unschedulable: false`` (an uncordon) is stored, and served, as no field at all."""
    if resource == "nodes":
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("unschedulable") is False:
            del spec["unschedulable"]


def initial_status(resource: str, obj: KubeObject) -> dict[str, Any] | None:
    """The status a new object starts with (Go zero values the server serializes), or None for none."""
    make = _INITIAL_STATUS.get(resource)
    return make(obj) if make is not None else None


def apply_create_defaults(resource: str, obj: KubeObject, *, reset_status: bool) -> KubeObject:
    """A copy of ``obj`` with the server's defaults and its initial status.

    ``obj`` must already carry ``metadata.name`` and ``metadata.uid`` (the Job selector uses the uid).
    With ``reset_status`` (a create through the API of a type with a status subresource) whatever status
    the client sent is replaced by the initial one; otherwise the initial status fills only a missing one.
    """
    result = copy.deepcopy(obj)
    if resource in _STRUCT_SPEC:
        result.setdefault("spec", {})
    hook = _ON_CREATE.get(resource)
    if hook is not None:
        hook(result)
    if reset_status or "status" not in result:
        status = initial_status(resource, result)
        if status is None:
            result.pop("status", None)
        else:
            result["status"] = status
    return result
