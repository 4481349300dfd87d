"""Snapshot v1 model: what docs/snapshot.md says is valid, invalid, optional and ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES

from agent.backends.replay import SnapshotError, load_snapshot, parse_snapshot
from core.snapshot import SNAPSHOT_SCHEMA, NodeSnapshot, XidEvent, pci_key

FIXTURE = FIXTURES / "snapshots" / "contracts-example.json"


def _minimal(**gpu: Any) -> dict[str, Any]:
    return {"schema": SNAPSHOT_SCHEMA, "node": "n1", "gpus": [{"index": 0, "uuid": "GPU-1", **gpu}]}


def test_the_contract_example_round_trips_unchanged() -> None:
    original = json.loads(FIXTURE.read_text())
    snapshot = load_snapshot(FIXTURE)
    dumped = json.loads(snapshot.to_json())
    dumped["gpus"][0]["xid_events"][0] = {
        k: v for k, v in dumped["gpus"][0]["xid_events"][0].items() if v is not None or k == "message"
    }
    assert dumped["gpus"][0]["xid_events"] == original["gpus"][0]["xid_events"]
    for key in ("schema", "node", "driver_version", "expected_gpu_count", "nvml_error"):
        assert dumped[key] == original[key]
    # Optional extensions absent from the contract's example are written as null.
    assert dumped["gpus"][0].pop("fabric") is None and dumped.pop("fabric") is None
    assert dumped["gpus"][0].pop("serial") is None
    for extension in ("sm_clock_mhz", "max_sm_clock_mhz", "utilization_pct", "vbios_version"):
        assert dumped["gpus"][0].pop(extension) is None
    gpu = {k: v for k, v in dumped["gpus"][0].items() if k != "xid_events"}
    assert gpu == {k: v for k, v in original["gpus"][0].items() if k != "xid_events"}


def test_only_schema_node_gpus_index_and_uuid_are_required() -> None:
    snapshot = parse_snapshot(json.dumps(_minimal()))
    gpu = snapshot.gpus[0]
    assert gpu.temperature_c is None and gpu.ecc is None and gpu.nvlink is None
    assert gpu.xid_events == []


@pytest.mark.parametrize("missing", ["schema", "node", "gpus"])
def test_a_missing_required_node_field_makes_the_file_invalid(missing: str) -> None:
    data = _minimal()
    del data[missing]
    with pytest.raises(SnapshotError, match=missing):
        parse_snapshot(json.dumps(data))


@pytest.mark.parametrize("missing", ["index", "uuid"])
def test_a_missing_required_gpu_field_makes_the_file_invalid(missing: str) -> None:
    data = _minimal()
    del data["gpus"][0][missing]
    with pytest.raises(SnapshotError, match=rf"gpus\.0\.{missing}"):
        parse_snapshot(json.dumps(data))


def test_another_schema_version_is_refused_by_name() -> None:
    data = _minimal()
    data["schema"] = "gpuhealth.snapshot/v2"
    with pytest.raises(SnapshotError, match=r"unsupported schema 'gpuhealth\.snapshot/v2'"):
        parse_snapshot(json.dumps(data))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature_c", "41"),
        ("lost", "false"),
        ("power_w", "121.5"),
        ("ecc", {"enabled": 1}),
        ("nvlink", {}),
    ],
)
def test_a_wrongly_typed_value_is_invalid_not_coerced(field: str, value: object) -> None:
    with pytest.raises(SnapshotError, match=field):
        parse_snapshot(json.dumps(_minimal(**{field: value})))


def test_unknown_extra_fields_are_ignored_at_every_level() -> None:
    data = _minimal(future_field=1, ecc={"enabled": True, "new_counter": 3})
    data["collector"] = "newer-agent"
    snapshot = parse_snapshot(json.dumps(data))
    assert snapshot.gpus[0].ecc is not None and snapshot.gpus[0].ecc.enabled is True


def test_null_event_list_means_no_events() -> None:
    assert parse_snapshot(json.dumps(_minimal(xid_events=None))).gpus[0].xid_events == []


def test_an_integer_power_reading_is_accepted_as_watts() -> None:
    assert parse_snapshot(json.dumps(_minimal(power_w=120))).gpus[0].power_w == 120.0


def test_snapshots_are_immutable() -> None:
    snapshot = parse_snapshot(json.dumps(_minimal()))
    with pytest.raises(ValueError, match="frozen"):
        snapshot.node = "other"  # type: ignore[misc]


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null"], ids=["empty", "truncated", "array", "null"])
def test_unparseable_files_get_one_line_errors(text: str) -> None:
    with pytest.raises(SnapshotError) as info:
        parse_snapshot(text, source="x.json")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("x.json: ")


def test_an_unreadable_file_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"nope\.json: cannot read snapshot: No such file"):
        load_snapshot(tmp_path / "nope.json")


@pytest.mark.parametrize("spelling", ["0000:3b:00", "00000000:3B:00.0", "0000:3B:00.0", "3b:00.0", "3B:00"])
def test_pci_addresses_compare_whatever_their_spelling(spelling: str) -> None:
    assert pci_key(spelling) == "0000:3b:00"


def test_gpu_lookup_by_pci_address_accepts_the_kernel_log_spelling() -> None:
    snapshot = NodeSnapshot(
        node="n",
        gpus=[{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:3B:00.0"}],  # type: ignore[list-item]
    )

    def at(address: str) -> XidEvent:
        return XidEvent(xid=79, source="kernel_log", pci_bus_id=address)

    assert snapshot.owner_of(at("0000:3b:00")) is not None
    assert snapshot.owner_of(at("0000:3c:00")) is None
    assert snapshot.owner_of(at("garbage")) is None
