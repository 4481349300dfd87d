"""Runbook: ``gpuhealth agent`` as a process on a node without a GPU driver, against ``gpuhealth sim kube``.

It starts, serves /healthz, /readyz and /metrics, marks its node ``unknown`` (never unhealthy: no driver is
not a fault), and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from repo_paths import REPO_ROOT
from waiting import SLOW_HANG_GUARD_S, wait_until

NODE = "gpu-node-0"
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def gpuhealth(*args: str, env: dict[str, str] | None = None, stderr: Path) -> subprocess.Popen[bytes]:
    with stderr.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuhealth.cli.main", *args],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=env,
            cwd=REPO_ROOT,
        )


def stop(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """``gpuhealth sim kube`` with one GPU node, in its own process; yields its kubeconfig."""
    path = tmp_path / "kubeconfig"
    sim = gpuhealth("sim", "kube", "--nodes", "1", "--kubeconfig-out", str(path), stderr=tmp_path / "sim.err")
    try:
        assert wait_until(path.exists, timeout=SLOW_HANG_GUARD_S, interval=0.1), (
            "the emulator never wrote its kubeconfig"
        )
        yield path
    finally:
        stop(sim)


def answers(url: str, status: int = 200) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == status
    except httpx.HTTPError:
        return False


def node_label(kubeconfig: Path) -> str | None:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        metadata = client.CoreV1Api(api_client).read_node(NODE).metadata
        labels = (metadata.labels if metadata is not None else None) or {}
    finally:
        api_client.close()
    return labels.get("gpuhealth.io/state")


@pytest.mark.slow
def test_the_agent_process_serves_its_endpoints_reports_unknown_and_stops_on_sigterm(
    kubeconfig: Path, tmp_path: Path
) -> None:
    port = free_port()
    settings = tmp_path / "agent.yaml"
    settings.write_text(
        f"interval_s: 1\nstate_dir: {tmp_path / 'state'}\nhttp:\n  host: 127.0.0.1\n  port: {port}\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "NODE_NAME": NODE,
        "GPUHEALTH_KUBERNETES__KUBECONFIG": str(kubeconfig),
        "GPUHEALTH_LOG_FORMAT": "json",
    }
    agent = gpuhealth("agent", "--config", str(settings), env=env, stderr=tmp_path / "agent.err")
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(
            lambda: answers(f"{base}/healthz") or agent.poll() is not None,
            timeout=SLOW_HANG_GUARD_S,
            interval=0.1,
        )
        assert agent.poll() is None, (tmp_path / "agent.err").read_text()
        assert wait_until(lambda: answers(f"{base}/readyz"), timeout=SLOW_HANG_GUARD_S, interval=0.1)
        metrics = httpx.get(f"{base}/metrics", timeout=2).text
        assert 'code="NVML_UNAVAILABLE"' in metrics
        assert "gpuhealth_agent_loop_duration_seconds_count" in metrics
        assert wait_until(
            lambda: node_label(kubeconfig) == "unknown", timeout=SLOW_HANG_GUARD_S, interval=0.1
        )
    finally:
        code = stop(agent)
    log = (tmp_path / "agent.err").read_text(encoding="utf-8")
    assert code == 0, log
    assert '"agent_stopped"' in log
    assert (tmp_path / "state" / "state.json").exists()


def test_a_bad_settings_file_is_one_line_on_stderr_and_exit_2(tmp_path: Path) -> None:
    settings = tmp_path / "agent.yaml"
    settings.write_text("interval_s: -1\n", encoding="utf-8")
    agent = gpuhealth("agent", "--config", str(settings), stderr=tmp_path / "agent.err")
    assert agent.wait(SLOW_HANG_GUARD_S) == 2
    lines = (tmp_path / "agent.err").read_text(encoding="utf-8").strip().splitlines()
    assert len(lines) == 1
    assert str(settings) in lines[0] and "interval_s" in lines[0]
