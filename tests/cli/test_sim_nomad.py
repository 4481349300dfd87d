"""``gpuhealth sim nomad``: serves the emulated Nomad API in the foreground and stops on a signal."""

from __future__ import annotations

import subprocess
import sys

import httpx

_MAIN = "import sys; from gpuhealth.cli.main import main; sys.exit(main(sys.argv[1:]))"


def test_sim_nomad_prints_address_and_token_serves_and_stops_on_sigterm() -> None:
    """With --acl it prints the address, then the management token; the token reads nodes; SIGTERM -> 0."""
    process = subprocess.Popen(
        [sys.executable, "-c", _MAIN, "sim", "nomad", "--nodes", "2", "--acl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip()
        token_line = process.stdout.readline().strip()
        assert address.startswith("http://127.0.0.1:")
        assert token_line.startswith("management token: ")
        token = token_line.removeprefix("management token: ")
        assert httpx.get(f"{address}/v1/nodes", timeout=5).status_code == 403
        nodes = httpx.get(f"{address}/v1/nodes", headers={"X-Nomad-Token": token}, timeout=5).json()
        assert [n["Name"] for n in nodes] == ["gpu-node-0", "gpu-node-1"]
        process.terminate()
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sim_nomad_rejects_a_negative_node_count() -> None:
    """gpuhealth sim nomad --nodes -1: one line on stderr, non-zero exit, no traceback."""
    result = subprocess.run(
        [sys.executable, "-c", _MAIN, "sim", "nomad", "--nodes", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--nodes" in result.stderr
