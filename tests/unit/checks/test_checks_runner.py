"""run_checks: every family in a fixed order, one verdict, and a crashing check never hides the others."""

from __future__ import annotations

from checks_builders import gpu, gpu_with_xids, node, xid

from checks.config import ChecksConfig
from checks.runner import CHECKS, RegisteredCheck, run_checks
from core.findings import Action, Finding, Status
from core.snapshot import NodeSnapshot


def test_registry_runs_every_family_in_a_fixed_order() -> None:
    assert [check.name for check in CHECKS] == [
        "presence",
        "xid",
        "ecc",
        "row_remap",
        "retired_pages",
        "pcie",
        "nvlink",
        "thermal",
        "recovery_action",
        "persistence",
        "fabric",
        "dcgm",
    ]


def test_a_healthy_node_is_ok_with_no_findings() -> None:
    verdict = run_checks(node(gpu(0), gpu(1), expected_gpu_count=2))
    assert (verdict.node, verdict.status, verdict.action, verdict.findings) == (
        "n1",
        Status.OK,
        Action.NONE,
        [],
    )


def test_an_empty_node_with_no_expectation_is_ok() -> None:
    assert run_checks(node()).status is Status.OK


def test_verdict_is_the_worst_finding_and_lists_worst_first() -> None:
    snapshot = node(gpu_with_xids(xid(13), xid(79), clocks_event_reasons=0x40))
    verdict = run_checks(snapshot)
    assert (verdict.status, verdict.action) == (Status.FAIL, Action.REBOOT)
    assert verdict.findings[0].code == "XID_79"
    assert {f.code for f in verdict.findings} == {"XID_79", "XID_13", "THERMAL_SLOWDOWN"}


def test_config_none_means_defaults() -> None:
    snapshot = node(gpu(persistence_mode=False))
    assert run_checks(snapshot, None) == run_checks(snapshot, ChecksConfig())
    enabled = ChecksConfig.from_mapping({"persistence": {"enabled": True}})
    assert run_checks(snapshot, enabled).status is Status.WARN


def _broken(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    raise RuntimeError("boom\nwith a second line")


def test_a_raising_check_becomes_check_error_and_the_others_still_run() -> None:
    checks = (RegisteredCheck("broken", _broken), *CHECKS)
    verdict = run_checks(node(gpu_with_xids(xid(79))), checks=checks)
    by_code = {f.code: f for f in verdict.findings}
    error = by_code["CHECK_ERROR"]
    assert (error.check, error.status, error.action, error.gpu) == (
        "broken",
        Status.UNKNOWN,
        Action.NONE,
        None,
    )
    assert "RuntimeError: boom with a second line" in error.message
    assert by_code["XID_79"].action is Action.REBOOT
    assert verdict.status is Status.FAIL


def test_a_raising_check_alone_makes_the_node_unknown_not_failed() -> None:
    verdict = run_checks(node(gpu()), checks=(RegisteredCheck("broken", _broken),))
    assert (verdict.status, verdict.action) == (Status.UNKNOWN, Action.NONE)
