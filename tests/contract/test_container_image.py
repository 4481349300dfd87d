"""The container image's recipe works: the tree the Dockerfile copies, installed as its build stage installs
it (into a fresh prefix, from that tree alone), runs `gpuhealth --help`, serves `gpuhealth aggregator` and
runs `gpuhealth agent --dry-run` against an emulated cluster. No Docker engine runs here, so this builds the
same file system instead; a package, data file or entry point the recipe leaves out fails here.

The processes run with the base interpreter and a PYTHONPATH of the new prefix first, then the project's
installed dependencies as a plain path (so no editable-install hook of the repository is loaded), from a
working directory outside the repository: what they import of gpuhealth comes from the prefix only.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from waiting import SLOW_HANG_GUARD_S, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-node-0"


def build_stage_copies() -> list[str]:
    """The paths the Dockerfile's build stage copies from the repository, in order."""
    text = (REPO_ROOT / "Dockerfile").read_text()
    build = text.split(" AS build", 1)[1].split("\nFROM ", 1)[0]
    copied: list[str] = []
    for line in build.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            copied.extend(line.split()[1:-1])
    return copied


@pytest.fixture(scope="module")
def image_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Dockerfile's tree, installed the way its build stage installs it, into a prefix of its own."""
    context = tmp_path_factory.mktemp("context")
    for path in build_stage_copies():
        source = REPO_ROOT / path
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(source, context / path, ignore=ignore)
        else:
            shutil.copy2(source, context / path)
    prefix = tmp_path_factory.mktemp("image") / "site-packages"
    install = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
        "--no-index", "--target", str(prefix), str(context),
    ]  # fmt: skip
    subprocess.run(install, check=True, timeout=300, capture_output=True)
    return prefix


def image_env(prefix: Path) -> dict[str, str]:
    dependencies = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHEALTH_", "PYTHON", "NODE_NAME"))}
    return {**env, "PYTHONPATH": os.pathsep.join([str(prefix), dependencies]), "PYTHONNOUSERSITE": "1"}


def base_python() -> str:
    return getattr(sys, "_base_executable", sys.executable)


def gpuhealth_in_image(
    prefix: Path, *args: str, cwd: Path, env: dict[str, str] | None = None, stderr: Path | None = None
) -> subprocess.Popen[str]:
    """`gpuhealth ARGS` as the image's entry point runs it (the console script's target, from the prefix)."""
    script = "import sys; from gpuhealth.cli.main import main; sys.exit(main(sys.argv[1:]))"
    sink = stderr.open("w") if stderr is not None else subprocess.PIPE
    return subprocess.Popen(
        [base_python(), "-c", script, *args],
        cwd=cwd,
        env={**image_env(prefix), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=sink,
        text=True,
    )


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stopped(process: subprocess.Popen[str]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(SLOW_HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def test_the_image_tree_installs_every_package_and_nothing_else(image_prefix: Path) -> None:
    installed = {p.name for p in image_prefix.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")}
    assert installed == {"gpuhealth", "core", "agent", "checks", "remediation", "aggregator", "bin"}
    assert (image_prefix / "bin" / "gpuhealth").is_file()  # the entry point
    assert (image_prefix / "aggregator" / "migrations" / "versions").is_dir()
    assert {p.name for p in (image_prefix / "aggregator" / "ui").iterdir()} >= {
        "index.html",
        "app.js",
        "app.css",
    }
    assert not (image_prefix / "tests").exists()


def test_gpuhealth_help_runs_from_the_image_and_imports_only_from_it(
    image_prefix: Path, tmp_path: Path
) -> None:
    process = gpuhealth_in_image(image_prefix, "--help", cwd=tmp_path)
    out, err = process.communicate(timeout=SLOW_HANG_GUARD_S)
    assert process.returncode == 0, err
    assert "aggregator" in out and "agent" in out
    probe = subprocess.run(
        [base_python(), "-c", "import gpuhealth, aggregator, core; print(gpuhealth.__file__, core.__file__)"],
        cwd=tmp_path,
        env=image_env(image_prefix),
        capture_output=True,
        text=True,
        timeout=SLOW_HANG_GUARD_S,
        check=True,
    )
    assert all(Path(path).is_relative_to(image_prefix) for path in probe.stdout.split())


def test_the_image_carries_no_simulator_and_says_so(image_prefix: Path, tmp_path: Path) -> None:
    """Neither the simulator's code nor its dependencies are in the image; its commands say how to get it."""
    probe = subprocess.run(
        [base_python(), "-c", "import importlib.util as u; print(u.find_spec('sim'))"],
        cwd=tmp_path,
        env=image_env(image_prefix),
        capture_output=True,
        text=True,
        timeout=SLOW_HANG_GUARD_S,
        check=True,
    )
    assert probe.stdout.split() == ["None"]
    (metadata,) = image_prefix.glob("gpuhealth-*.dist-info/METADATA")
    required = {
        re.split(r"[<>=!~\[ ;]", line.split(":", 1)[1].strip(), maxsplit=1)[0].lower()
        for line in metadata.read_text().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert "pydantic" in required
    assert not required & {"jsonpatch", "jsonpointer", "python-hcl2", "gpuhealth-sim"}
    for command in ("demo", "sim"):
        process = gpuhealth_in_image(image_prefix, command, "--headless", cwd=tmp_path)
        out, err = process.communicate(timeout=SLOW_HANG_GUARD_S)
        assert process.returncode == 2 and not out
        assert err.count("\n") == 1 and f"'gpuhealth {command}' comes with the simulator" in err, err
        assert "pip install ./sim" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_aggregator_serves_from_the_image(image_prefix: Path, tmp_path: Path) -> None:
    """It migrates its SQLite file (the migrations ship in the image) and answers /readyz."""
    port = free_port()
    env = {
        "GPUHEALTH_AGGREGATOR_TOKEN": "t" * 48,
        "GPUHEALTH_AGGREGATOR_DATABASE_URL": f"sqlite:///{tmp_path / 'aggregator.db'}",
    }
    server = gpuhealth_in_image(
        image_prefix, "aggregator", "--port", str(port), cwd=tmp_path, env=env, stderr=tmp_path / "err"
    )
    try:
        ready = wait_until(
            lambda: answers(f"http://127.0.0.1:{port}/readyz") or server.poll() is not None,
            timeout=SLOW_HANG_GUARD_S,
        )
        assert ready and server.poll() is None, (tmp_path / "err").read_text()
    finally:
        code = stopped(server)
    # uvicorn shuts down gracefully on SIGTERM, then ends by the signal it caught (so -SIGTERM, or 0).
    assert code in (0, -signal.SIGTERM), (tmp_path / "err").read_text()
    assert "Traceback" not in (tmp_path / "err").read_text()


@pytest.fixture
def kube_sim(tmp_path: Path) -> Iterator[Path]:
    """The emulated cluster, run from the project (not from the image), with one GPU node."""
    kubeconfig = tmp_path / "kubeconfig"
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuhealth",
            "sim",
            "kube",
            "--nodes",
            "1",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert wait_until(kubeconfig.exists, timeout=SLOW_HANG_GUARD_S)
        yield kubeconfig
    finally:
        stopped(sim)


@pytest.mark.slow
def test_the_agent_runs_dry_from_the_image(image_prefix: Path, tmp_path: Path, kube_sim: Path) -> None:
    """`gpuhealth agent --dry-run` on a node without a driver: ready, plans, changes nothing, stops cleanly."""
    port = free_port()
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"interval_s: 1\nstate_dir: {tmp_path / 'state'}\nhttp:\n  host: 127.0.0.1\n  port: {port}\n",
        encoding="utf-8",
    )
    env = {
        "NODE_NAME": NODE,
        "GPUHEALTH_KUBERNETES__KUBECONFIG": str(kube_sim),
        "GPUHEALTH_LOG_FORMAT": "json",
    }
    agent = gpuhealth_in_image(
        image_prefix,
        "agent",
        "--config",
        str(config),
        "--dry-run",
        cwd=tmp_path,
        env=env,
        stderr=tmp_path / "err",
    )
    try:
        ready = wait_until(
            lambda: answers(f"http://127.0.0.1:{port}/readyz") or agent.poll() is not None,
            timeout=SLOW_HANG_GUARD_S,
        )
        assert ready and agent.poll() is None, (tmp_path / "err").read_text()
    finally:
        code = stopped(agent)
    log = (tmp_path / "err").read_text()
    assert code == 0, log
    assert re.search(r'"dry_run": ?true', log)
