"""GPU nodes run by KWOK on the real API server: made as the GPU Operator's nodes report themselves
(``sim.kube.fleet.gpu_node``: its labels, ``nvidia.com/gpu``), annotated for KWOK, which makes them Ready
and renews their Leases; the node lifecycle controller then takes the ``not-ready`` taint off."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from sim.kube.fleet import gpu_node
from sim.realkube.stack import KWOK_ANNOTATION

CREATORS = 8  # nodes created at once
READY_POLL_S = 0.5
STATUS_KEYS = ("capacity", "allocatable", "addresses", "nodeInfo")


def now() -> str:
    """The API's timestamp format, for a node's first heartbeat."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def create_kwok_node(core: Any, name: str, gpus: int = 8) -> None:
    """One GPU node for KWOK; ``core`` is a ``CoreV1Api`` (dict bodies go out as they are)."""
    body = gpu_node(name, gpus=gpus, heartbeat=now())
    status = body.pop("status")
    body["metadata"]["annotations"][KWOK_ANNOTATION] = "fake"
    core.create_node(body)
    core.patch_node_status(name, {"status": {key: status[key] for key in STATUS_KEYS}})


def create_kwok_nodes(
    api: client.ApiClient,
    names: Iterable[str],
    gpus: int = 8,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Every node of ``names`` (a few creators at once); ``progress(done)`` after each."""
    core = client.CoreV1Api(api)
    done = 0
    with ThreadPoolExecutor(max_workers=CREATORS, thread_name_prefix="kwok-create") as pool:
        for _ in pool.map(lambda name: create_kwok_node(core, name, gpus), names):
            done += 1
            if progress is not None:
                progress(done)


def schedulable(node: dict[str, Any]) -> bool:
    """Ready and without the lifecycle controller's ``node.kubernetes.io/`` taints."""
    conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
    taints = [t for t in node["spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]
    return conditions.get("Ready") == "True" and not taints


def wait_schedulable(api: client.ApiClient, names: Iterable[str], timeout_s: float) -> float:
    """Until every node of ``names`` is :func:`schedulable`; returns the seconds it took, raises
    TimeoutError naming how many were not."""
    wanted = set(names)
    started = time.monotonic()
    core = client.CoreV1Api(api)
    while True:
        listed = api.sanitize_for_serialization(core.list_node())
        ready = {n["metadata"]["name"] for n in listed["items"] if schedulable(n)} & wanted
        elapsed = time.monotonic() - started
        if ready == wanted:
            return elapsed
        if elapsed > timeout_s:
            raise TimeoutError(f"only {len(ready)} of {len(wanted)} KWOK nodes Ready after {timeout_s:.0f} s")
        time.sleep(READY_POLL_S)
