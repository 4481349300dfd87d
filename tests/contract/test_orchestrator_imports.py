"""Each agent process loads only its own orchestrator's client: a Nomad agent never imports the
``kubernetes`` package, a Kubernetes agent never imports python-nomad, and reading the agent's settings loads
neither.

The agents run as real ``gpuhealth agent`` processes (no GPU driver: the node is ``unknown``) against the
emulators in processes of their own, under ``python -X importtime``, which prints every module the process
imports. They are stopped once ready (first pass done, the node read), so the start-up, the wiring and the
first ticks are all covered.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from waiting import SLOW_HANG_GUARD_S, wait_until

NODE = "gpu-node-0"
REPO_ROOT = Path(__file__).parents[2]
_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(?P<module>[\w.]+)\s*$")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def gpuhealth(
    *args: str, stderr: Path, env: dict[str, str] | None = None, importtime: bool = False
) -> subprocess.Popen[bytes]:
    flags = ["-X", "importtime"] if importtime else []
    with stderr.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, *flags, "-m", "gpuhealth", *args],
            stdout=subprocess.PIPE,
            stderr=sink,
            env=env,
            cwd=REPO_ROOT,
        )


def stopped(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(SLOW_HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def imported_modules(stderr: Path) -> set[str]:
    """The modules a ``-X importtime`` process imported, from its stderr."""
    lines = stderr.read_text(encoding="utf-8", errors="replace").splitlines()
    return {m.group("module") for line in lines if (m := _IMPORT_LINE.match(line))}


def of_package(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


@pytest.fixture
def kube_sim(tmp_path: Path) -> Iterator[Path]:
    """``gpuhealth sim kube`` with one GPU node; yields its kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    sim = gpuhealth(
        "sim", "kube", "--nodes", "1", "--kubeconfig-out", str(kubeconfig), stderr=tmp_path / "sim.err"
    )
    try:
        assert wait_until(kubeconfig.exists, timeout=SLOW_HANG_GUARD_S), (tmp_path / "sim.err").read_text()
        yield kubeconfig
    finally:
        stopped(sim)


@pytest.fixture
def nomad_sim(tmp_path: Path) -> Iterator[str]:
    """``gpuhealth sim nomad`` with one GPU client node; yields that node's local client address."""
    sim = gpuhealth("sim", "nomad", "--nodes", "1", stderr=tmp_path / "sim.err")
    try:
        assert sim.stdout is not None
        address = sim.stdout.readline().decode().strip()
        assert address.startswith("http://127.0.0.1:"), (tmp_path / "sim.err").read_text()
        yield f"{address}/local/{NODE}"
    finally:
        stopped(sim)


def run_agent_until_ready(tmp_path: Path, orchestrator_env: dict[str, str]) -> set[str]:
    """Start ``gpuhealth agent``, wait for /readyz, stop it; the modules it imported."""
    port = free_port()
    settings = tmp_path / "agent.yaml"
    settings.write_text(
        f"interval_s: 1\nstate_dir: {tmp_path / 'state'}\nhttp:\n  host: 127.0.0.1\n  port: {port}\n",
        encoding="utf-8",
    )
    env = {**os.environ, "NODE_NAME": NODE, **orchestrator_env}
    env.pop("NOMAD_TOKEN", None)
    stderr = tmp_path / "agent.err"
    agent = gpuhealth("agent", "--config", str(settings), env=env, stderr=stderr, importtime=True)
    try:
        assert wait_until(
            lambda: ready(f"http://127.0.0.1:{port}/readyz") or agent.poll() is not None,
            timeout=SLOW_HANG_GUARD_S,
        )
        assert agent.poll() is None, stderr.read_text()
    finally:
        assert stopped(agent) == 0, stderr.read_text()[-4000:]
    return imported_modules(stderr)


@pytest.mark.slow
def test_a_nomad_agent_process_never_imports_the_kubernetes_client(tmp_path: Path, nomad_sim: str) -> None:
    modules = run_agent_until_ready(
        tmp_path, {"GPUHEALTH_ORCHESTRATOR": "nomad", "GPUHEALTH_NOMAD__ADDRESS": nomad_sim}
    )
    assert "nomad" in modules and "remediation.nomad.executor" in modules  # it ran as a Nomad agent
    assert of_package(modules, "kubernetes") == set()


@pytest.mark.slow
def test_a_kubernetes_agent_process_never_imports_python_nomad(tmp_path: Path, kube_sim: Path) -> None:
    modules = run_agent_until_ready(tmp_path, {"GPUHEALTH_KUBERNETES__KUBECONFIG": str(kube_sim)})
    assert "kubernetes" in modules and "remediation.kubernetes.executor" in modules
    assert of_package(modules, "nomad") == set()


def test_reading_the_agent_settings_loads_neither_orchestrator_client() -> None:
    probe = (
        "import sys, agent.settings; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'nomad')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=SLOW_HANG_GUARD_S,
        check=True,
        cwd=REPO_ROOT,
    )
    assert result.stdout.strip() == "[]"
