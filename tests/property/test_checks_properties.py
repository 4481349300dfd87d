"""Properties of run_checks over generated snapshots: it never crashes, and nulls alone never fail a node."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.presence import TELEMETRY_FIELDS
from checks.runner import run_checks
from checks.xid_catalogue import CATALOGUE, status_for_action
from core.findings import Status
from core.snapshot import SNAPSHOT_SCHEMA, GpuSnapshot, NodeSnapshot

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIGHT = settings(SETTINGS, max_examples=60)

counts = st.none() | st.integers(min_value=0, max_value=10**7)
flags = st.none() | st.booleans()
small = st.none() | st.integers(min_value=-50, max_value=200)

XID_MESSAGES = (
    st.none()
    | st.sampled_from(
        [
            "GPU has fallen off the bus.",
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            "GPU recovery action changed from 0x0 (None) to 0x9 (Something New)",
            "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0 0x0 0x0 0x0)",
            "RLW_REMAP Nonfatal XC0 i0 Link -1",
            "pid=41233, name=python3, Ch 00000008",
            "to 0x (",
            "",
        ]
    )
    | st.text(max_size=60)
)

xid_numbers = st.sampled_from([*CATALOGUE, 999]) | st.integers(min_value=0, max_value=400)

xid_events = st.fixed_dictionaries(
    {"xid": xid_numbers, "source": st.sampled_from(["nvml", "kernel_log", "dcgm"]), "message": XID_MESSAGES},
    optional={
        "pci_bus_id": st.sampled_from(["0000:3b:00", "00000000:18:00.0", "not-a-bus-id", "0:0"]),
        "gpu_uuid": st.sampled_from(["GPU-0", "GPU-1", "GPU-nobody"]),
    },
)

ecc = st.none() | st.fixed_dictionaries(
    {
        "enabled": flags,
        "volatile_uncorrected": counts,
        "aggregate_uncorrected": counts,
        "volatile_corrected": counts,
        "aggregate_corrected": counts,
    }
)
remapped_rows = st.none() | st.fixed_dictionaries(
    {"correctable": counts, "uncorrectable": counts, "pending": flags, "failure": flags}
)
retired_pages = st.none() | st.fixed_dictionaries(
    {"single_bit": counts, "double_bit": counts, "pending": flags}
)
pcie = st.none() | st.fixed_dictionaries(
    {"gen": small, "width": small, "max_gen": small, "max_width": small, "replay_counter": counts}
)
nvlink = st.none() | st.lists(
    st.fixed_dictionaries(
        {
            "link": st.integers(min_value=0, max_value=17),
            "active": flags,
            "replay_errors": counts,
            "recovery_errors": counts,
            "crc_errors": counts,
        }
    ),
    max_size=18,
)


@st.composite
def gpu_dicts(draw: st.DrawFn, index: int) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": draw(st.none() | st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-PCIE-40GB", "X"])),
        "pci_bus_id": draw(st.none() | st.sampled_from(["00000000:3B:00.0", "0000:18:00", "bogus"])),
        "lost": draw(flags),
        "persistence_mode": draw(flags),
        "temperature_c": draw(small),
        "memory_temperature_c": draw(small),
        "power_w": draw(st.none() | st.floats(min_value=0, max_value=1000)),
        "power_limit_w": draw(st.none() | st.floats(min_value=0, max_value=1000)),
        "clocks_event_reasons": draw(st.none() | st.integers(min_value=0, max_value=2**32 - 1)),
        "ecc": draw(ecc),
        "remapped_rows": draw(remapped_rows),
        "retired_pages": draw(retired_pages),
        "pcie": draw(pcie),
        "nvlink": draw(nvlink),
        "recovery_action": draw(st.none() | st.integers(min_value=0, max_value=12)),
        "xid_events": draw(st.lists(xid_events, max_size=6)),
    }


@st.composite
def snapshots(draw: st.DrawFn) -> NodeSnapshot:
    count = draw(st.integers(min_value=0, max_value=4))
    data = {
        "schema": SNAPSHOT_SCHEMA,
        "node": "n1",
        "expected_gpu_count": draw(st.none() | st.integers(min_value=0, max_value=8)),
        "nvml_error": draw(st.none() | st.sampled_from(["Driver Not Loaded", "Unknown Error"])),
        "gpus": [draw(gpu_dicts(index)) for index in range(count)],
        "unattributed_xid_events": draw(st.lists(xid_events, max_size=3)),
    }
    return NodeSnapshot.model_validate(data)


HEALTHY: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:18:00.0",
    "lost": False,
    "persistence_mode": True,
    "temperature_c": 40,
    "memory_temperature_c": 38,
    "power_w": 120.0,
    "power_limit_w": 700.0,
    "clocks_event_reasons": 1,
    "ecc": {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0},
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
    "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "replay_counter": 0},
    "nvlink": [{"link": 0, "active": True, "replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}],
    "recovery_action": 0,
}


@SETTINGS
@given(snapshots())
def test_run_checks_never_crashes_on_any_valid_snapshot(snapshot: NodeSnapshot) -> None:
    verdict = run_checks(snapshot)
    assert "CHECK_ERROR" not in {finding.code for finding in verdict.findings}
    assert verdict.node == snapshot.node


@LIGHT
@given(snapshots())
def test_xid_findings_status_always_follows_their_action(snapshot: NodeSnapshot) -> None:
    for finding in run_checks(snapshot).findings:
        if finding.check == "xid":
            assert finding.status is status_for_action(finding.action)


@SETTINGS
@given(st.integers(min_value=0, max_value=8), st.booleans())
def test_gpus_with_only_index_and_uuid_never_fail(count: int, count_known: bool) -> None:
    """All GPUs present but answering nothing: unknown at worst, whether or not the count is known."""
    gpus = [GpuSnapshot(index=index, uuid=f"GPU-{index}") for index in range(count)]
    snapshot = NodeSnapshot(node="n1", gpus=gpus, expected_gpu_count=count if count_known else None)
    verdict = run_checks(snapshot)
    assert verdict.status is not Status.FAIL
    assert [finding.code for finding in verdict.findings] == ["GPU_UNREADABLE"] * count


@SETTINGS
@given(st.sets(st.sampled_from([*TELEMETRY_FIELDS, "name", "pci_bus_id", "lost"])), st.data())
def test_nulling_any_readings_of_a_healthy_gpu_never_fails(nulled: set[str], data: st.DataObject) -> None:
    fields = {name: (None if name in nulled else value) for name, value in HEALTHY.items()}
    for group in ("ecc", "remapped_rows", "retired_pages", "pcie"):
        values = fields[group]
        if isinstance(values, dict):
            keys = data.draw(st.sets(st.sampled_from(sorted(values))), label=f"{group} nulls")
            fields[group] = {key: (None if key in keys else value) for key, value in values.items()}
    gpu = GpuSnapshot.model_validate({"index": 0, "uuid": "GPU-0", **fields})
    verdict = run_checks(NodeSnapshot(node="n1", gpus=[gpu], expected_gpu_count=1))
    assert verdict.status in {Status.OK, Status.UNKNOWN}


@LIGHT
@given(snapshots())
def test_run_checks_is_deterministic(snapshot: NodeSnapshot) -> None:
    assert run_checks(snapshot) == run_checks(snapshot)
