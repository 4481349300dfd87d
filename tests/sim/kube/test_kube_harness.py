"""``KubeSim``, its controller manager, its kubeconfig and ``gpuhealth sim kube``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config

from core.clock import ManualClock
from sim.kube.harness import KubeSim, running_kube_sim
from sim.kube.manager import ControllerManager, UnknownControllerError
from sim.kube.protocols import ObjectStore
from sim.kube.store import MemoryStore


class _Counter:
    """A controller that counts its passes and labels one node (a level-triggered write)."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.passes = 0
        self.fail = fail

    def reconcile(self, store: ObjectStore) -> None:
        self.passes += 1
        if self.fail:
            raise RuntimeError("broken controller")
        node = store.get("nodes", None, "n1")
        if node is not None and node["metadata"].get("labels", {}).get("seen") != "yes":
            node["metadata"].setdefault("labels", {})["seen"] = "yes"
            store.update("nodes", node)


def test_manager_runs_enabled_controllers_until_settled() -> None:
    """Controllers reconcile after writes until a pass writes nothing; a failing one does not stop the rest."""
    store = MemoryStore(clock=ManualClock())
    broken, labeller, off = _Counter("broken", fail=True), _Counter("labeller"), _Counter("off")
    manager = ControllerManager(store, [broken, labeller, off], enabled=["broken", "labeller"])
    store.create("nodes", {"metadata": {"name": "n1"}})
    assert manager.wait_idle()
    node = store.get("nodes", None, "n1")
    assert node is not None
    assert node["metadata"]["labels"] == {"seen": "yes"}
    assert broken.passes >= 2
    assert off.passes == 0


def test_manager_thread_settles_after_writes() -> None:
    """The manager thread reacts to writes (coalesced) without a test driving it."""
    store = MemoryStore(clock=ManualClock())
    labeller = _Counter("labeller")
    manager = ControllerManager(store, [labeller], interval_s=0.05)
    manager.start()
    try:
        store.create("nodes", {"metadata": {"name": "n1"}})
        assert manager.wait_idle(5)
        node = store.get("nodes", None, "n1")
        assert node is not None
        assert node["metadata"]["labels"] == {"seen": "yes"}
    finally:
        manager.stop()


def test_manager_refuses_unknown_controller_names() -> None:
    """Switching a controller by a name the manager does not have is an error, not a silent no-op."""
    manager = ControllerManager(MemoryStore(), [_Counter("labeller")])
    with pytest.raises(UnknownControllerError):
        manager.disable("nope")


def test_kube_sim_starts_with_system_namespaces_and_nodes() -> None:
    """KubeSim(nodes=N) serves N GPU nodes and the system namespaces."""
    with running_kube_sim(nodes=3, controllers=False) as sim:
        core = client.CoreV1Api(sim.api_client())
        assert len(core.list_node().items) == 3
        names = {ns.metadata.name for ns in core.list_namespace().items}
        assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names


def test_kube_sim_with_controllers_runs_a_pod(kube_sim: KubeSim) -> None:
    """With its default controllers, a pod is scheduled onto a node and started."""
    core = client.CoreV1Api(kube_sim.api_client())
    core.create_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}},
    )
    assert kube_sim.settle(10)
    pod = core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "n1"
    assert pod.status.phase == "Running"


def test_written_kubeconfig_loads_in_the_official_client(tmp_path: Path) -> None:
    """The kubeconfig works with kubernetes.config.load_kube_config (plain HTTP, dummy token)."""
    with running_kube_sim(nodes=1, controllers=False) as sim:
        path = sim.write_kubeconfig(tmp_path / "kc")
        api = config.new_client_from_config(config_file=str(path))
        assert len(client.CoreV1Api(api).list_node().items) == 1


def test_context_manager_stops_the_listener() -> None:
    """Leaving the with-block stops serving (connections are refused afterwards)."""
    with KubeSim(controllers=False) as sim:
        url = sim.url
        assert httpx.get(f"{url}/healthz").text == "ok"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")


def test_cli_sim_kube_serves_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    """gpuhealth sim kube: prints the URL, writes a kubeconfig, serves, exits 0 on SIGTERM."""
    kubeconfig = tmp_path / "kc"
    script = "import sys; from gpuhealth.cli.main import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            script,
            "sim",
            "kube",
            "--nodes",
            "2",
            "--kubeconfig-out",
            str(kubeconfig),
            "--no-controllers",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        nodes = httpx.get(f"{url}/api/v1/nodes", timeout=5).json()["items"]
        assert len(nodes) == 2
        assert kubeconfig.exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_cli_rejects_a_bad_port() -> None:
    """gpuhealth sim kube --port 70000: one line on stderr, non-zero exit."""
    script = "import sys; from gpuhealth.cli.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", script, "sim", "kube", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--port" in result.stderr
