"""`gpuhealth demo` through the installed console script: the JSON summary, exit codes, bad scenario files."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from waiting import SLOW_HANG_GUARD_S

from tests.cli.conftest import GPUHEALTH

RunCli = Callable[..., subprocess.CompletedProcess[str]]

SMALL = """
schema: gpuhealth.scenario/v1
name: small
fleet: {nodes: 3, gpus_per_node: 2}
timeline:
  - {at: 0.5s, name: hit, target: {role: idle, index: 0}, fault: {kind: xid, xid: 79}}
expectations:
  - {name: the XID 79 node is tainted, kind: taint, target: {injection: hit}, value: %s, by: 6s}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_json_summary_has_each_expectation_and_the_fault_to_taint_latency(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """--json prints one object: scenario, passed, expectations [{name, expected, observed, passed}],
    the measured latencies with p50/p99, and the durations; exit 0 when every expectation held."""
    result = run_cli("demo", "--scenario", str(write(tmp_path, SMALL % "reboot")), "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["scenario"] == "small" and summary["passed"] is True and summary["nodes"] == 3
    (entry,) = summary["expectations"]
    assert {"name", "expected", "observed", "passed"} <= entry.keys()
    assert entry["passed"] is True and "tainted=reboot" in entry["observed"]
    (latency,) = summary["fault_to_taint"]
    assert latency["injection"] == "hit" and 0 < latency["seconds"] < 6
    assert summary["fault_to_taint_summary"]["samples"] == 1
    assert summary["fault_to_taint_summary"]["p99_s"] == latency["seconds"]
    assert isinstance(summary["alerts_received"], dict)
    assert summary["durations"]["total_s"] > 0


def test_an_expectation_that_does_not_hold_fails_the_run_with_exit_1(run_cli: RunCli, tmp_path: Path) -> None:
    """The taint's value is reboot, the scenario expects replace: the summary shows both and the exit is 1."""
    result = run_cli("demo", "--scenario", str(write(tmp_path, SMALL % "replace")), "--headless")

    assert result.returncode == 1, result.stderr
    assert "expectations failed" in result.stdout
    assert "tainted=replace" in result.stdout and "tainted=reboot" in result.stdout
    assert "demo:" in result.stderr  # progress lines go to stderr


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("schema: [oops", "not valid YAML at line 1"),
        (
            "schema: gpuhealth.scenario/v1\nname: x\ntimeline:\n"
            "- {at: 1s, target: {role: idle}, fault: {kind: melt}}\n",
            "timeline[0].fault: unknown kind 'melt'",
        ),
        ("schema: gpuhealth.scenario/v1\nfleet: {nodes: 4}\n", "name: Field required"),
        (
            "schema: gpuhealth.scenario/v1\nname: x\nfleet: {nodes: many}\n",
            "fleet.nodes: Input should be a valid",
        ),
    ],
    ids=["bad-yaml", "unknown-fault-kind", "missing-field", "wrong-type"],
)
def test_an_invalid_scenario_file_is_one_line_naming_the_problem_and_exit_2(
    run_cli: RunCli, tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, text)
    result = run_cli("demo", "--scenario", str(path), "--json")

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert str(path) in result.stderr and problem in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_scenario_file_is_one_line_and_exit_2(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("demo", "--scenario", str(tmp_path / "nope.yaml"))

    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "cannot read" in result.stderr


@pytest.mark.slow
def test_keep_prints_the_summary_and_the_exports_then_a_sigterm_ends_it_cleanly(tmp_path: Path) -> None:
    """--keep: the summary as the story ends, the fleet page's address (its token in the fragment) and the
    export line for the on-call commands; the page and the API still answer, the on-call commands work
    with the exported values, and SIGTERM ends the run with the story's code and its temporary directory
    (which held tokens) removed."""
    scenario = write(tmp_path, SMALL % "reboot")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250", "TMPDIR": str(scratch)}
    demo = subprocess.Popen(
        [str(GPUHEALTH), "demo", "--scenario", str(scenario), "--headless", "--keep", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert demo.stdout is not None
        lines: list[str] = []
        for line in demo.stdout:
            lines.append(line)
            if "GPUHEALTH_TOKEN=" in line:
                break
        output = "".join(lines)
        assert "all expectations held" in output, output  # the summary, before the wait
        assert "fleet page: http://127.0.0.1:" in output, output
        url = output.split("fleet page: ", 1)[1].split()[0]
        base, token = url.split("/ui/#token=")
        assert f"export GPUHEALTH_AGGREGATOR_URL={base} GPUHEALTH_TOKEN={token}" in output
        assert any(path.name.startswith("gpuhealth-demo-") for path in scratch.iterdir())
        assert httpx.get(f"{base}/ui/", timeout=5).status_code == 200
        grid = httpx.get(f"{base}/v1/fleet/grid", headers={"Authorization": f"Bearer {token}"}, timeout=5)
        assert grid.status_code == 200 and len(grid.json()) == 3
        oncall = subprocess.run(
            [str(GPUHEALTH), "status"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**env, "GPUHEALTH_AGGREGATOR_URL": base, "GPUHEALTH_TOKEN": token},
        )
        assert oncall.returncode == 0 and "3 nodes" in oncall.stdout, oncall.stderr
        demo.terminate()  # SIGTERM, as a service manager or a container runtime stops it
        rest, _ = demo.communicate(timeout=SLOW_HANG_GUARD_S)
        assert demo.returncode == 0, rest
        assert "Traceback" not in rest and "interrupted" not in rest
        assert list(scratch.iterdir()) == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def test_a_shipped_scenario_is_played_by_name_and_an_unknown_name_lists_them(run_cli: RunCli) -> None:
    from sim.cli.demo_cmd import scenario_file
    from sim.scenario.loader import shipped_scenarios

    assert scenario_file("breaker") == shipped_scenarios()["breaker"]
    result = run_cli("demo", "--scenario", "brekaer")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "no shipped scenario named 'brekaer' (shipped: api-outage, breaker, default" in result.stderr


def test_cluster_real_without_the_binaries_says_how_to_build_them_in_one_line_and_exits_2(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """--cluster real where the control plane is not built (the binaries' directory is empty): one line
    naming the build script, exit 2, before anything starts."""
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    result = run_cli(
        "demo", "--cluster", "real", "--headless", env={"GPUHEALTH_CONTROL_PLANE_BIN": str(empty)}
    )

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "tools/build-control-plane.sh" in result.stderr and "Traceback" not in result.stderr
    assert "starting" not in result.stdout


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (("--scenario", "api-outage"), "API outage is played on the emulator only"),
        (("--scenario", "gpu-quarantine"), "partial drain"),
        (("--orchestrator", "nomad"), "the real stack is Kubernetes"),
    ],
)
def test_cluster_real_refuses_what_the_real_stack_cannot_play_in_one_line(
    run_cli: RunCli, arguments: tuple[str, ...], reason: str
) -> None:
    """An API outage, a partial drain (KWOK nodes serve no PodResources) or a Nomad scenario on --cluster
    real: one line saying why, exit 2, before the stack is looked for."""
    result = run_cli("demo", "--cluster", "real", "--headless", *arguments)

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and reason in result.stderr, result.stderr
