"""GPU-operator-shaped nodes, fast fleet creation and multi-document workload loading."""

from __future__ import annotations

import time

import pytest

from core.clock import ManualClock
from sim.kube.fleet import WorkloadError, build_fleet, gpu_node, load_workloads
from sim.kube.store import MemoryStore


def test_gpu_node_carries_gfd_labels_capacity_and_ready_conditions() -> None:
    node = gpu_node("gpu-node-7", gpus=8, product="NVIDIA-H200")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "143771"
    assert labels["nvidia.com/cuda.driver.major"] == "550"
    assert labels["kubernetes.io/hostname"] == "gpu-node-7"
    assert "node.kubernetes.io/instance-type" in labels
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
    }
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")
    assert {a["type"] for a in node["status"]["addresses"]} == {"InternalIP", "Hostname"}


@pytest.mark.slow
def test_build_fleet_creates_ten_thousand_nodes_in_seconds() -> None:
    """build_fleet must make a 10,000-node fleet in seconds (about 3 s on 2 cores); 30 s is a hang guard."""
    store = MemoryStore(clock=ManualClock())
    started = time.perf_counter()
    names = build_fleet(store, 10_000)
    elapsed = time.perf_counter() - started
    assert len(names) == 10_000
    assert names[0] == "gpu-node-0000"
    assert len(store.list("nodes")) == 10_000
    assert elapsed < 30.0, f"10,000 nodes took {elapsed:.1f}s"


WORKLOADS = """
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: trainer:1}]
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: train, namespace: ml}
spec: {minAvailable: 1, selector: {matchLabels: {app: train}}}
"""


def test_load_workloads_creates_namespaces_first() -> None:
    store = MemoryStore(clock=ManualClock())
    created = load_workloads(store, WORKLOADS)
    assert [obj["kind"] for obj in created] == ["Namespace", "Job", "PodDisruptionBudget"]
    assert store.get("jobs.batch", "ml", "train") is not None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: [", "not valid YAML"),
        ("apiVersion: x/v1\nkind: Gizmo\nmetadata: {name: g}", "unknown kind"),
        ("- 1", "mapping"),
    ],
)
def test_load_workloads_refuses_bad_documents(text: str, problem: str) -> None:
    with pytest.raises(WorkloadError, match=problem):
        load_workloads(MemoryStore(clock=ManualClock()), text)
