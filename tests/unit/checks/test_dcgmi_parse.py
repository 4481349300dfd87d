"""dcgmi JSON of DCGM 3.x and 4.x parsed by the pure parser, tolerant of spellings and chatter."""

from __future__ import annotations

import pytest
from repo_paths import FIXTURES as TEST_FIXTURES

from agent.backends.dcgm.dcgmi_output import DcgmiOutputError, parse_diag, parse_health
from checks.dcgm import system_code, upper_snake
from checks.dcgmi import health_findings
from core.dcgm import Grade, grade_from_text

FIXTURES = TEST_FIXTURES / "dcgm"


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_diag_3x_with_null_tests_and_gpu_id_strings_passes() -> None:
    result = parse_diag(text("diag-3.1.0-r1-pass.json"))
    assert result.version == "3.1.0"
    assert len(result.tests) == 9
    assert result.tests[0].results[0].gpu == 0 and len(result.tests[0].results) == 8
    assert result.passed


def test_diag_3x_with_leading_status_line_reports_the_failed_gpu() -> None:
    result = parse_diag(text("diag-3.3.5-r2-pcie-fail.json"))
    assert result.failed_tests == ("PCIe",)
    pcie = next(test for test in result.tests if test.name == "PCIe")
    failed = [r for r in pcie.results if r.grade is Grade.FAIL]
    assert [r.gpu for r in failed] == [2]
    assert "error_id 23" in failed[0].warnings[0]


def test_diag_4x_entity_results_and_metadata_version() -> None:
    result = parse_diag(text("diag-4.2.3-r2-memory-fail.json"))
    assert result.version == "4.2.3"
    assert [test.name for test in result.tests] == ["software", "memory", "pcie"]
    assert not result.passed


@pytest.mark.parametrize("word", ["Pass", "PASS", "pass", "Healthy"])
def test_pass_in_any_spelling(word: str) -> None:
    assert grade_from_text(word) is Grade.PASS


def test_other_grades_and_names() -> None:
    assert grade_from_text("Skip") is Grade.SKIP
    assert grade_from_text("Warning") is Grade.WARN
    assert grade_from_text("Failure") is Grade.FAIL
    assert grade_from_text("Internal error") is None
    assert upper_snake("Page Retirement/Row Remap") == "PAGE_RETIREMENT_ROW_REMAP"
    assert system_code("Memory system") == "MEM"
    assert system_code("NVSwitch fatal errors") == "NVSWITCH_FATAL"


def test_health_of_a_switch_entity_is_node_level_reboot() -> None:
    found = health_findings(parse_health(text("health-4.2-nvswitch-fatal.json")), {})
    assert [(f.code, f.gpu, f.action.value) for f in found] == [
        ("DCGM_HEALTH_NVSWITCH_FATAL", None, "reboot")
    ]


def test_not_json_is_an_error_not_a_verdict() -> None:
    with pytest.raises(DcgmiOutputError):
        parse_diag("Error: unable to connect to host engine")
    with pytest.raises(DcgmiOutputError, match="DCGM Diagnostic"):
        parse_diag('{"something": 1}')
    with pytest.raises(DcgmiOutputError, match="body"):
        parse_health('{"header": []}')
