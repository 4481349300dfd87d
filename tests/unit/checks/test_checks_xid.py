"""XID workflows: what NVIDIA's catalogue says to do with each XID in the context of the others."""

from __future__ import annotations

from typing import Any

import pytest
from checks_builders import gpu, gpu_with_xids, node, xid
from repo_paths import FIXTURES

from agent.backends.kernel_log import parse_xid_line
from checks.config import ChecksConfig
from checks.xid import check_xid, occurrences, recovery_action_from_message
from core.findings import Action, Finding, Status
from core.snapshot import XidEvent

DEFAULTS = ChecksConfig()


def _by_code(findings: list[Finding]) -> dict[str, Finding]:
    return {finding.code: finding for finding in findings}


def _judge(*events: dict[str, Any], config: ChecksConfig = DEFAULTS, **gpu_fields: Any) -> dict[str, Finding]:
    return _by_code(check_xid(node(gpu_with_xids(*events, **gpu_fields)), config))


# --- XID 48 (WORKFLOW_XID_48) ---


def test_xid48_alone_resets_the_gpu() -> None:
    finding = _judge(xid(48))["XID_48"]
    assert (finding.status, finding.action) == (Status.FAIL, Action.RESET_GPU)


@pytest.mark.parametrize("partner", [63, 64])
def test_xid48_with_63_or_64_on_the_same_gpu_drains_and_resets(partner: int) -> None:
    finding = _judge(xid(48), xid(partner))["XID_48"]
    assert (finding.status, finding.action) == (Status.FAIL, Action.DRAIN_AND_RESET)
    assert f"XID {partner}" in finding.message


def test_xid48_and_63_on_different_gpus_do_not_combine() -> None:
    snapshot = node(gpu_with_xids(xid(48), index=0), gpu_with_xids(xid(63), index=1))
    findings = _by_code(check_xid(snapshot, DEFAULTS))
    assert findings["XID_48"].action is Action.RESET_GPU


# --- XID 45 (WORKFLOW_XID_45) ---


def test_xid45_alone_is_ok_with_a_fabric_manager_hint() -> None:
    finding = _judge(xid(45))["XID_45"]
    assert (finding.status, finding.action) == (Status.OK, Action.NONE)
    assert "fabricmanager" in finding.message


def test_xid45_with_another_xid_follows_the_other() -> None:
    findings = _judge(xid(79), xid(45))
    assert (findings["XID_45"].status, findings["XID_45"].action) == (Status.OK, Action.NONE)
    assert "sympathetic to XID 79" in findings["XID_45"].message
    assert findings["XID_79"].action is Action.REBOOT


# --- XID 154 (follow the recovery action) ---


@pytest.mark.parametrize(
    ("message", "action"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x0 (None)", Action.NONE),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action.RESET_GPU),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", Action.REBOOT),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", Action.DRAIN_AND_RESET),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", Action.DRAIN_AND_RESET),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", Action.REBOOT),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", Action.RESET_GPU),
        ("GPU recovery action changed from None to (Node Reboot Required)", Action.REBOOT),
        ("GPU recovery action changed from 0x0 (None) to 0x7 (System Reboot)", Action.REBOOT),
    ],
)
def test_xid154_follows_the_action_its_message_names(message: str, action: Action) -> None:
    finding = _judge(xid(154, "kernel_log", message), recovery_action=None)["XID_154"]
    assert finding.action is action


def test_xid154_message_wins_over_the_recovery_action_field() -> None:
    message = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert _judge(xid(154, "kernel_log", message), recovery_action=1)["XID_154"].action is Action.REBOOT


@pytest.mark.parametrize(
    ("field", "action"),
    [
        (0, Action.NONE),
        (1, Action.RESET_GPU),
        (2, Action.REBOOT),
        (3, Action.DRAIN_AND_RESET),
        (4, Action.DRAIN_AND_RESET),
    ],
)
def test_xid154_without_message_follows_the_recovery_action_field(field: int, action: Action) -> None:
    assert _judge(xid(154), recovery_action=field)["XID_154"].action is action


def test_xid154_with_neither_message_nor_field_resets_the_gpu() -> None:
    finding = _judge(xid(154), recovery_action=None)["XID_154"]
    assert (finding.action, finding.status) == (Action.RESET_GPU, Status.FAIL)


def test_xid154_with_an_unreadable_message_falls_back_to_the_field() -> None:
    assert _judge(xid(154, "kernel_log", "garbled"), recovery_action=2)["XID_154"].action is Action.REBOOT


def test_xid154_the_newest_stated_change_holds() -> None:
    older = xid(154, "kernel_log", "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)")
    newer = xid(
        154, "kernel_log", "GPU recovery action changed from 0x3 (Drain P2P) to 0x1 (GPU Reset Required)"
    )
    assert _judge(older, newer, recovery_action=None)["XID_154"].action is Action.RESET_GPU


def test_recovery_message_parser_reports_how_it_read_the_message() -> None:
    parsed = recovery_action_from_message(
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        DEFAULTS,
    )
    assert parsed == (Action.REBOOT, "0x2 (Node Reboot Required)")
    assert recovery_action_from_message(None, DEFAULTS) is None
    assert recovery_action_from_message("no action here", DEFAULTS) is None


# --- XID 64, 13 / 31 repeats ---


def test_xid64_once_resets_the_gpu_and_repeated_means_replace() -> None:
    assert _judge(xid(64))["XID_64"].action is Action.RESET_GPU
    repeated = _judge(xid(64), xid(64))["XID_64"]
    assert (repeated.action, repeated.status) == (Action.REPLACE, Status.FAIL)
    assert "2x" in repeated.message


def test_xid64_repeat_threshold_and_action_are_configurable() -> None:
    config = ChecksConfig.from_mapping(
        {"xid": {"xid64_repeat_threshold": 3, "xid64_repeat_action": "reboot"}}
    )
    assert _judge(xid(64), xid(64), config=config)["XID_64"].action is Action.RESET_GPU
    assert _judge(xid(64), xid(64), xid(64), config=config)["XID_64"].action is Action.REBOOT


def test_the_same_xid_reported_by_nvml_and_the_kernel_log_counts_once() -> None:
    finding = _judge(xid(64, "nvml"), xid(64, "kernel_log", "Row Remapper: failed"))["XID_64"]
    assert finding.action is Action.RESET_GPU
    assert "1x" in finding.message


def test_occurrences_is_the_largest_count_of_any_single_source() -> None:
    events = [XidEvent.model_validate(e) for e in (xid(13), xid(13), xid(13, "kernel_log"), xid(13, "dcgm"))]
    assert occurrences(events) == 2


@pytest.mark.parametrize("code", [13, 31])
def test_app_errors_below_the_repeat_threshold_just_restart_the_app(code: int) -> None:
    finding = _judge(xid(code), xid(code))[f"XID_{code}"]
    assert (finding.status, finding.action) == (Status.WARN, Action.RESTART_APP)
    assert "diagnostics" not in finding.message


@pytest.mark.parametrize("code", [13, 31])
def test_app_errors_repeated_on_one_gpu_recommend_diagnostics_but_stay_restart_app(code: int) -> None:
    finding = _judge(xid(code), xid(code), xid(code))[f"XID_{code}"]
    assert (finding.status, finding.action) == (Status.WARN, Action.RESTART_APP)
    assert "DCGM diagnostics" in finding.message
    assert "3x" in finding.message


def test_repeated_app_errors_can_be_configured_to_take_the_gpu_out() -> None:
    config = ChecksConfig.from_mapping({"xid": {"app_error_repeat_action": "reset_gpu"}})
    finding = _judge(xid(31), xid(31), xid(31), config=config)["XID_31"]
    assert (finding.status, finding.action) == (Status.FAIL, Action.RESET_GPU)


# --- XID 74, NVLink5 ---


def test_xid74_resets_the_gpu_and_names_the_peer_as_a_suspect() -> None:
    finding = _judge(xid(74))["XID_74"]
    assert finding.action is Action.RESET_GPU
    assert "peer" in finding.message


@pytest.mark.parametrize(
    ("messages", "action"),
    [
        (["NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0 0x0 0x0 0x0)"], Action.RESET_GPU),
        (["NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x0 0x0 0x0 0x0)"], Action.NONE),
        ([None], Action.RESET_GPU),
        (["RLW_REMAP Nonfatal XC0 i0 Link -1", "RLW_REMAP Fatal XC0 i0 Link -1"], Action.RESET_GPU),
        (["something without a severity word"], Action.RESET_GPU),
    ],
)
def test_nvlink5_xids_follow_the_severity_word(messages: list[str | None], action: Action) -> None:
    events = [xid(149, "kernel_log", message) for message in messages]
    assert _judge(*events)["XID_149"].action is action


# --- unknown XIDs and overrides ---


@pytest.mark.parametrize("code", [999, 173, 250])
def test_unknown_xids_are_contact_support_level(code: int) -> None:
    finding = _judge(xid(code))[f"XID_{code}"]
    assert (finding.status, finding.action) == (Status.FAIL, Action.REPLACE)
    assert "not in NVIDIA's catalogue" in finding.message


def test_unknown_xid_action_is_configurable() -> None:
    config = ChecksConfig.from_mapping({"xid": {"unknown_action": "reset_gpu"}})
    assert _judge(xid(999), config=config)["XID_999"].action is Action.RESET_GPU


def test_overrides_replace_the_catalogue_action() -> None:
    config = ChecksConfig.from_mapping({"xid": {"overrides": {109: "restart_app", 79: "replace"}}})
    findings = _judge(xid(109), xid(79), config=config)
    assert (findings["XID_109"].status, findings["XID_109"].action) == (Status.WARN, Action.RESTART_APP)
    assert findings["XID_79"].action is Action.REPLACE
    assert "overridden by configuration" in findings["XID_109"].message


def test_an_override_of_none_silences_an_xid_to_ok() -> None:
    config = ChecksConfig.from_mapping({"xid": {"overrides": {79: "none", 999: "none"}}})
    findings = _judge(xid(79), xid(999), config=config)
    assert {f.status for f in findings.values()} == {Status.OK}
    assert {f.action for f in findings.values()} == {Action.NONE}


def test_overrides_apply_after_workflows() -> None:
    config = ChecksConfig.from_mapping({"xid": {"overrides": {48: "reboot"}}})
    assert _judge(xid(48), xid(63), config=config)["XID_48"].action is Action.REBOOT


# --- shape of findings, attribution ---


def test_one_finding_per_gpu_and_code_with_the_count() -> None:
    snapshot = node(gpu_with_xids(xid(13), xid(13), xid(79), index=0), gpu_with_xids(xid(13), index=1))
    findings = check_xid(snapshot, DEFAULTS)
    assert sorted((f.gpu, f.code) for f in findings) == sorted(
        [
            (snapshot.gpus[0].uuid, "XID_13"),
            (snapshot.gpus[0].uuid, "XID_79"),
            (snapshot.gpus[1].uuid, "XID_13"),
        ]
    )
    first = next(f for f in findings if f.gpu == snapshot.gpus[0].uuid and f.code == "XID_13")
    assert "2x" in first.message
    assert all(f.check == "xid" for f in findings)


def test_unattributed_events_are_node_level_findings_naming_the_pci_address() -> None:
    snapshot = node(gpu(0), unattributed_xid_events=[xid(79, "kernel_log", pci_bus_id="0000:DB:00")])
    (finding,) = check_xid(snapshot, DEFAULTS)
    assert (finding.gpu, finding.code, finding.action) == (None, "XID_79", Action.REBOOT)
    assert "PCI 0000:db:00" in finding.message


def test_unattributed_events_naming_a_listed_gpu_join_its_workflow() -> None:
    listed = gpu_with_xids(xid(63), index=0, pci_bus_id="00000000:3B:00.0")
    snapshot = node(listed, unattributed_xid_events=[xid(48, "kernel_log", pci_bus_id="0000:3b:00")])
    (finding_48,) = [f for f in check_xid(snapshot, DEFAULTS) if f.code == "XID_48"]
    assert (finding_48.gpu, finding_48.action) == (listed.uuid, Action.DRAIN_AND_RESET)


def test_unattributed_events_naming_a_listed_gpu_by_uuid_are_attributed_to_it() -> None:
    listed = gpu(0)
    snapshot = node(listed, unattributed_xid_events=[xid(79, "dcgm", gpu_uuid=listed.uuid)])
    (finding,) = check_xid(snapshot, DEFAULTS)
    assert finding.gpu == listed.uuid


def test_unattributed_events_without_any_address_are_grouped_as_unknown_address() -> None:
    (finding,) = check_xid(node(unattributed_xid_events=[xid(95, "kernel_log")]), DEFAULTS)
    assert finding.gpu is None
    assert "a GPU of unknown address" in finding.message


def test_unattributed_events_of_an_unlisted_uuid_name_that_uuid() -> None:
    (finding,) = check_xid(
        node(gpu(0), unattributed_xid_events=[xid(79, "dcgm", gpu_uuid="GPU-gone")]), DEFAULTS
    )
    assert (finding.gpu, finding.action) == (None, Action.REBOOT)
    assert "GPU-gone (not listed)" in finding.message


def test_a_gpu_without_events_yields_no_xid_finding() -> None:
    assert check_xid(node(gpu(0), gpu(1)), DEFAULTS) == []


def test_the_xid_check_can_be_disabled() -> None:
    config = ChecksConfig.from_mapping({"xid": {"enabled": False}})
    assert check_xid(node(gpu_with_xids(xid(79))), config) == []


# --- NVLink5 (144-150): NVIDIA's decode sheet ----------------------------------------------------------------

NVLINK5_LINES = (FIXTURES / "real" / "kernel-gpud1160-1174-kmsg-nvlink5.txt").read_text().splitlines()


def _real_nvlink5(xid_number: int, unit: str) -> str:
    """The message of the real line of that XID and unit (the fixture's source: its README)."""
    event = next(
        e
        for line in NVLINK5_LINES
        if (e := parse_xid_line(line)) is not None
        and e.xid == xid_number
        and e.message
        and e.message.startswith(unit + " ")
    )
    assert event.message is not None
    return event.message


@pytest.mark.parametrize(
    ("xid_number", "message", "action"),
    [
        # "Fatal" on the line, but link-down reason 0b100110 (intrinfo 0x026001c6): IGNORE in the sheet
        (
            149,
            "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            Action.NONE,
        ),
        # reason 0b100101 (0x025001c6): the peer device is the source, RESET_GPU
        (
            149,
            "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            Action.RESET_GPU,
        ),
        # "Nonfatal" on the line, but error status 0x12 = 0x2 | 0x10 of SAW_MVB: both RESET_GPU in the sheet
        (
            144,
            "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000012 0x00000000 0x00000000 0x00000000 0x00000000)",
            Action.RESET_GPU,
        ),
        # RLW_REMAP 0x4: XID_154_EVAL, the XID 154 the driver raises with it carries the action
        (
            145,
            "RLW_REMAP Nonfatal XC0 i0 Link 02 (0x00400082 0x00000004 0x00000000 0x00000000 0x00000000 0x00000000)",
            Action.NONE,
        ),
        # a status the sheet does not list for the unit: the severity word decides
        (145, "RLW_RXPIPE Fatal XC0 i0 Link 13 (0x0409a0c2 0x00000040 0x0 0x0 0x0 0x0)", Action.RESET_GPU),
    ],
)
def test_nvlink5_xids_are_judged_by_the_catalogues_decode(
    xid_number: int, message: str, action: Action
) -> None:
    finding = _judge(xid(xid_number, "kernel_log", message))[f"XID_{xid_number}"]
    assert finding.action is action
    if action is Action.NONE and "0x026001c6" in message:
        assert "IGNORE" in finding.message


def test_the_real_nvlink5_lines_decode_as_the_sheet_says() -> None:
    assert (
        _judge(xid(149, "kernel_log", _real_nvlink5(149, "NETIR_LINK_EVT")))["XID_149"].action is Action.NONE
    )
    assert _judge(xid(145, "kernel_log", _real_nvlink5(145, "RLW_RXPIPE")))["XID_145"].action is Action.NONE
    assert _judge(xid(149, "kernel_log", _real_nvlink5(149, "NETIR")))["XID_149"].action is Action.RESET_GPU
