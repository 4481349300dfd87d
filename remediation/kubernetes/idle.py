"""Is the node idle? The pods bound to it that hold GPUs, read once when a deep diagnostic is due.

One list of the node's pods (``fieldSelector=spec.nodeName=NODE``, as the drain lists them), never per
tick. A pod holds GPUs when any of its containers requests or limits ``nvidia.com/gpu`` above zero (for
an extended resource the request defaults to the limit) and it has not finished (phase neither Succeeded
nor Failed): a pending pod already bound to the node will start there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.errors import KubeExecutorError
from remediation.kubernetes.rest import JsonObject, RestClient

GPU_RESOURCE = "nvidia.com/gpu"
PODS_PATH = "/api/v1/pods"
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class IdleProbeError(KubeExecutorError):
    """The node's pods could not be listed; whether it is idle is not known."""


def gpu_pods(api_client: client.ApiClient, node: str, *, request_timeout_s: float = 10.0) -> list[str]:
    """``namespace/name`` of every unfinished pod on ``node`` that holds GPUs; IdleProbeError when the
    pods cannot be listed."""
    rest = RestClient(api_client, request_timeout_s=request_timeout_s)
    try:
        answer = rest.json("GET", PODS_PATH, query=[("fieldSelector", f"spec.nodeName={node}")])
    except ApiException as error:
        raise IdleProbeError(f"could not list the pods of {node}: HTTP {error.status}") from error
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
        raise IdleProbeError(f"could not list the pods of {node}: {type(error).__name__}") from None
    items: list[JsonObject] = answer.get("items") or []
    return [_pod_name(pod) for pod in items if holds_gpus(pod)]


def holds_gpus(pod: JsonObject) -> bool:
    """An unfinished pod with a container that asks for at least one GPU."""
    if (pod.get("status") or {}).get("phase") in _FINISHED_PHASES:
        return False
    spec = pod.get("spec") or {}
    containers: Iterable[Any] = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return any(_gpu_count(container) > 0 for container in containers)


def _gpu_count(container: Any) -> int:
    resources = (container or {}).get("resources") or {}
    counts = [_quantity((resources.get(kind) or {}).get(GPU_RESOURCE)) for kind in ("limits", "requests")]
    return max(counts)


def _quantity(value: object) -> int:
    """GPUs are whole numbers (``"1"``, ``8``); anything unreadable counts as one (safe side)."""
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 1


def _pod_name(pod: JsonObject) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
