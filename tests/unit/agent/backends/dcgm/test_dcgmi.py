"""dcgmi run for real: a fake ``dcgmi`` on PATH prints recorded DCGM outputs chosen by its arguments."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from dcgm_judge import judge
from repo_paths import FIXTURES as TEST_FIXTURES

from agent.backends.dcgm.dcgmi import DcgmiError, DcgmiHealthSource, run_diag, run_health
from checks.dcgm_readings import DCGMI_UNAVAILABLE as UNAVAILABLE_CODE
from checks.dcgmi import diag_findings
from core.findings import Action, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

FIXTURES = TEST_FIXTURES / "dcgm"

FAKE = """#!{python}
import sys, time
mode = {mode!r}
args = sys.argv[1:]
if mode == "hang":
    time.sleep(60)
if mode == "garbage":
    print("Error: unable to establish a connection to the specified host: localhost")
    sys.exit(255)
name = {{"health": {health!r}, "diag": {diag!r}}}[args[0]]
sys.stdout.write(open(name).read())
sys.exit(226 if "fail" in name and args[0] == "diag" else 0)
"""

SNAPSHOT = NodeSnapshot(
    node="gpu-node-03", gpus=[GpuSnapshot(index=0, uuid="GPU-zero"), GpuSnapshot(index=1, uuid="GPU-one")]
)


def install_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "ok", **files: str) -> None:
    script = tmp_path / "dcgmi"
    script.write_text(
        FAKE.format(
            python=sys.executable,
            mode=mode,
            health=str(FIXTURES / files.get("health", "health-3.3-healthy.json")),
            diag=str(FIXTURES / files.get("diag", "diag-3.1.0-r1-pass.json")),
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_health_failures_become_dcgm_health_findings_on_their_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake(tmp_path, monkeypatch, health="health-3.3-mem-fail-pcie-warn.json")
    found = judge(DcgmiHealthSource().read(SNAPSHOT), SNAPSHOT)
    by_code = {f.code: f for f in found}
    assert by_code["DCGM_HEALTH_MEM"].gpu == "GPU-one"
    assert (by_code["DCGM_HEALTH_MEM"].status, by_code["DCGM_HEALTH_MEM"].action) == (
        Status.FAIL,
        Action.RESET_GPU,
    )
    assert (by_code["DCGM_HEALTH_PCIE"].gpu, by_code["DCGM_HEALTH_PCIE"].status) == ("GPU-zero", Status.WARN)


def test_healthy_node_has_no_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch)
    assert run_health().overall is not None
    assert judge(DcgmiHealthSource().read(SNAPSHOT), SNAPSHOT) == []


def test_diag_that_exits_non_zero_is_still_parsed_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dcgmi diag exits non-zero when a test fails, yet prints its JSON: the result is read, not lost."""
    install_fake(tmp_path, monkeypatch, diag="diag-4.2.3-r2-memory-fail.json")
    run = run_diag(2, timeout_s=30)
    assert not run.passed
    assert run.result.failed_tests == ("memory",)
    found = {f.code: f for f in diag_findings(run.result, {0: "GPU-zero", 1: "GPU-one"})}
    assert found["DCGM_DIAG_MEMORY"].gpu == "GPU-one"
    assert found["DCGM_DIAG_SOFTWARE"].status is Status.WARN


def test_passing_diag_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch)
    run = run_diag(1, timeout_s=30)
    assert run.passed
    assert diag_findings(run.result, {}) == []


def test_missing_dcgmi_is_one_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    found = judge(DcgmiHealthSource().read(SNAPSHOT), SNAPSHOT)
    assert [(f.code, f.status) for f in found] == [(UNAVAILABLE_CODE, Status.UNKNOWN)]


def test_failing_dcgmi_without_json_is_one_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch, mode="garbage")
    found = judge(DcgmiHealthSource().read(SNAPSHOT), SNAPSHOT)
    assert [(f.code, f.status) for f in found] == [(UNAVAILABLE_CODE, Status.UNKNOWN)]
    assert "exited 255" in found[0].message


def test_hanging_dcgmi_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch, mode="hang")
    with pytest.raises(DcgmiError, match=r"no answer within 0\.5 s"):
        run_diag(1, timeout_s=0.5)
    found = judge(DcgmiHealthSource(timeout_s=0.5).read(SNAPSHOT), SNAPSHOT)
    assert [f.status for f in found] == [Status.UNKNOWN]


def test_diag_level_outside_dcgm_levels_is_refused() -> None:
    with pytest.raises(ValueError, match="diag level"):
        run_diag(7, timeout_s=1)


def test_a_remote_host_engine_is_named_after_the_subcommand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--host`` is an option of each dcgmi subcommand (``dcgmi health --host 10.0.0.7 -c -j``): a pod
    without host networking reaches the node's nv-hostengine that way."""
    seen = tmp_path / "argv.txt"
    script = tmp_path / "dcgmi"
    health = FIXTURES / "health-3.3-healthy.json"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nopen({str(seen)!r}, 'w').write(' '.join(sys.argv[1:]))\n"
        f"sys.stdout.write(open({str(health)!r}).read())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert judge(DcgmiHealthSource(host="10.0.0.7").read(SNAPSHOT), SNAPSHOT) == []
    assert seen.read_text() == "health --host 10.0.0.7 -c -j"
