"""Which pods keep a node from being idle for a deep diagnostic: unfinished pods that hold GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from remediation.kubernetes.idle import holds_gpus


def pod(
    phase: str = "Running", *, limits: Any = None, requests: Any = None, init: bool = False
) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}
    spec: dict[str, Any] = {"containers": [{"name": "side"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"] = [{"name": "side"}, container]
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (pod(limits={"nvidia.com/gpu": "8"}), True),
        (pod("Pending", limits={"nvidia.com/gpu": 1}), True),  # bound to the node: it will start there
        (pod(requests={"nvidia.com/gpu": "1"}), True),
        (pod(limits={"nvidia.com/gpu": "1"}, init=True), True),
        (pod(limits={"nvidia.com/gpu": "odd"}), True),  # unreadable counts as a GPU: the safe side
        (pod("Succeeded", limits={"nvidia.com/gpu": "8"}), False),
        (pod("Failed", limits={"nvidia.com/gpu": "8"}), False),
        (pod(limits={"nvidia.com/gpu": "0"}), False),
        (pod(limits={"cpu": "4", "memory": "1Gi"}), False),
        ({"metadata": {"name": "bare"}}, False),
    ],
)
def test_only_unfinished_pods_asking_for_gpus_keep_the_node_busy(
    case: dict[str, Any], expected: bool
) -> None:
    assert holds_gpus(case) is expected
