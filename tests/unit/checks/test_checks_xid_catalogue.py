"""The XID catalogue data: complete against NVIDIA's list, and every row maps its bucket as the contract says."""

from __future__ import annotations

import pytest
from checks_builders import gpu_with_xids, node, xid

from checks.config import ChecksConfig
from checks.xid import check_xid
from checks.xid_catalogue import (
    BUCKET_ACTION,
    CATALOGUE,
    UNKNOWN_XID,
    Bucket,
    XidEntry,
    lookup,
    status_for_action,
)
from core.findings import Action, Status

ROWS = sorted(CATALOGUE.values(), key=lambda entry: entry.xid)


def test_catalogue_lists_every_xid_nvidia_numbers_from_1_to_172() -> None:
    assert sorted(CATALOGUE) == list(range(1, 173))


@pytest.mark.parametrize(
    "xid_number",
    [8, 32, 38, 44, 56, 57, 58, 65, 92, 93, 95, 110, *range(111, 119), *range(122, 144), *range(144, 161)],
)
def test_older_and_newer_xids_named_in_the_brief_are_catalogued(xid_number: int) -> None:
    assert lookup(xid_number) is not None


def test_nvml_unknown_xid_999_is_not_a_catalogue_row() -> None:
    assert UNKNOWN_XID == 999
    assert lookup(999) is None


@pytest.mark.parametrize("entry", ROWS, ids=lambda entry: f"xid{entry.xid}")
def test_plain_bucket_rows_take_the_contract_action_and_status_follows_the_action(entry: XidEntry) -> None:
    if entry.bucket in BUCKET_ACTION:
        assert entry.action is BUCKET_ACTION[entry.bucket]
    else:
        assert entry.note, f"XID {entry.xid} has bucket {entry.bucket} but no recorded decision"
    assert entry.status is status_for_action(entry.action)


@pytest.mark.parametrize("entry", ROWS, ids=lambda entry: f"xid{entry.xid}")
def test_one_event_of_each_xid_alone_yields_the_row_action_and_status(entry: XidEntry) -> None:
    """Alone, without message or recovery field, every XID (workflow ones included) gets its row's action."""
    snapshot = node(gpu_with_xids(xid(entry.xid), recovery_action=None))
    (finding,) = check_xid(snapshot, ChecksConfig())
    assert (finding.code, finding.action, finding.status) == (f"XID_{entry.xid}", entry.action, entry.status)


@pytest.mark.parametrize(
    ("xid_number", "bucket", "action"),
    [
        (13, Bucket.RESTART_APP, Action.RESTART_APP),
        (31, Bucket.RESTART_APP, Action.RESTART_APP),
        (43, Bucket.IGNORE, Action.NONE),
        (45, Bucket.WORKFLOW_XID_45, Action.NONE),
        (48, Bucket.WORKFLOW_XID_48, Action.RESET_GPU),
        (61, Bucket.CONTACT_SUPPORT, Action.REPLACE),
        (62, Bucket.RESET_GPU, Action.RESET_GPU),
        (63, Bucket.IGNORE, Action.NONE),
        (64, Bucket.RESET_GPU, Action.RESET_GPU),
        (68, Bucket.RESTART_APP, Action.RESTART_APP),
        (69, Bucket.RESTART_APP, Action.RESTART_APP),
        (74, Bucket.WORKFLOW_NVLINK_ERR, Action.RESET_GPU),
        (79, Bucket.RESTART_BM, Action.REBOOT),
        (92, Bucket.IGNORE, Action.NONE),
        (94, Bucket.RESTART_APP, Action.RESTART_APP),
        (95, Bucket.RESET_GPU, Action.RESET_GPU),
        (109, Bucket.RESET_GPU, Action.RESET_GPU),
        (119, Bucket.RESET_GPU, Action.RESET_GPU),
        (120, Bucket.RESET_GPU, Action.RESET_GPU),
        (121, Bucket.IGNORE, Action.NONE),
        (140, Bucket.RESET_GPU, Action.RESET_GPU),
        (143, Bucket.RESET_GPU, Action.RESET_GPU),
        (151, Bucket.RESTART_VM, Action.REBOOT),
        (154, Bucket.XID_154, Action.RESET_GPU),
        (155, Bucket.RESET_GPU, Action.RESET_GPU),
        (156, Bucket.RESET_GPU, Action.RESET_GPU),
        (157, Bucket.IGNORE, Action.NONE),
        (158, Bucket.RESET_GPU, Action.RESET_GPU),
        (159, Bucket.CHECK_UVM, Action.RESET_GPU),
    ],
)
def test_well_known_xids_carry_nvidias_bucket(xid_number: int, bucket: Bucket, action: Action) -> None:
    entry = CATALOGUE[xid_number]
    assert (entry.bucket, entry.action) == (bucket, action)


def test_nvlink5_xids_144_to_150_use_the_nvlink5_workflow() -> None:
    assert {CATALOGUE[n].bucket for n in range(144, 151)} == {Bucket.WORKFLOW_NVLINK5_ERR}


def test_xids_listed_without_a_bucket_are_marked_not_given() -> None:
    assert {n for n, entry in CATALOGUE.items() if entry.bucket is Bucket.NOT_GIVEN} == set(range(162, 173))


@pytest.mark.parametrize(
    ("action", "status"),
    [
        (Action.NONE, Status.OK),
        (Action.RESTART_APP, Status.WARN),
        (Action.RESET_GPU, Status.FAIL),
        (Action.DRAIN_AND_RESET, Status.FAIL),
        (Action.REBOOT, Status.FAIL),
        (Action.REPLACE, Status.FAIL),
    ],
)
def test_status_follows_action(action: Action, status: Status) -> None:
    assert status_for_action(action) is status


def test_bucket_mapping_is_the_contracts() -> None:
    assert {bucket.value: action.value for bucket, action in BUCKET_ACTION.items()} == {
        "IGNORE": "none",
        "RESTART_APP": "restart_app",
        "RESET_GPU": "reset_gpu",
        "DRAIN_AND_RESET": "drain_and_reset",
        "RESTART_VM": "reboot",
        "RESTART_BM": "reboot",
        "CONTACT_SUPPORT": "replace",
    }
