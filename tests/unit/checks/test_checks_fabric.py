"""Fabric checks: ports down, fabric manager, SXids (one snapshot) and flaps, rates, vanished devices (over
time, with the memory passed in)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from checks_builders import gpu, node
from repo_paths import FIXTURES

from agent.backends.infiniband import read_ib_ports
from agent.backends.kernel_log import parse_link_line, parse_sxid_line
from checks.config import ChecksConfig
from checks.fabric import FabricMemory, check_fabric, judge_fabric_trends, judge_logged_flaps
from checks.runner import run_checks
from core.findings import Action, Finding, Status
from core.snapshot import IbPort, NodeSnapshot

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
UP = ("4: ACTIVE", "5: LinkUp")
DOWN = ("1: DOWN", "3: Disabled")


def port(device: str, state: tuple[str, str] = UP, **fields: Any) -> dict[str, Any]:
    return {
        "device": device,
        "port": 1,
        "state": state[0],
        "phys_state": state[1],
        "link_layer": fields.pop("link_layer", "InfiniBand"),
        **fields,
    }


def fabric_node(*ports: dict[str, Any], at: datetime = T0, **fabric: Any) -> NodeSnapshot:
    return node(gpu(0), taken_at=at, fabric={"ib_ports": list(ports), **fabric})


def codes(findings: list[Finding]) -> list[str]:
    return [finding.code for finding in findings]


def config(**fabric: Any) -> ChecksConfig:
    return ChecksConfig.model_validate({"fabric": fabric})


# --- one snapshot -------------------------------------------------------------------------------------


def test_one_port_down_while_its_siblings_are_up_is_a_multi_node_fault() -> None:
    snapshot = fabric_node(*(port(f"mlx5_{n}") for n in range(7)), port("mlx5_7", DOWN))
    [finding] = check_fabric(snapshot, ChecksConfig())
    assert (finding.check, finding.code, finding.status, finding.action) == (
        "infiniband",
        "IB_PORT_DOWN",
        Status.FAIL,
        Action.REPLACE,
    )
    assert "mlx5_7/1 (1: DOWN / 3: Disabled)" in finding.message


def test_the_real_format_tree_flags_its_down_port() -> None:
    ports = read_ib_ports(FIXTURES / "fabric" / "sysfs-hgx")
    snapshot = node(gpu(0), fabric={"ib_ports": [p.model_dump() for p in ports or []]})
    [finding] = check_fabric(snapshot, ChecksConfig())
    assert finding.code == "IB_PORT_DOWN" and "mlx5_1/1" in finding.message


def test_half_the_ports_down_is_no_signal_without_an_expected_count() -> None:
    """Half uncabled is a layout, not a fault, unless the configuration says how many must be up."""
    snapshot = fabric_node(port("mlx5_0"), port("mlx5_1"), port("mlx5_2", DOWN), port("mlx5_3", DOWN))
    assert check_fabric(snapshot, ChecksConfig()) == []
    assert codes(check_fabric(snapshot, config(expected_active_ports=3))) == ["IB_PORT_DOWN"]
    assert check_fabric(snapshot, config(expected_active_ports=2)) == []


def test_siblings_are_counted_per_link_layer_and_ignored_ports_are_left_out() -> None:
    """A down Ethernet management port among up InfiniBand ports is not judged by them; a pattern
    leaves an uncabled port out altogether."""
    ib = [port(f"mlx5_{n}") for n in range(4)]
    mgmt = port("mlx5_bond_0", DOWN, link_layer="Ethernet")
    assert check_fabric(fabric_node(*ib, mgmt), ChecksConfig()) == []
    down = port("mlx5_9", DOWN, netdev="ibp9s0")
    assert codes(check_fabric(fabric_node(*ib, down), ChecksConfig())) == ["IB_PORT_DOWN"]
    assert check_fabric(fabric_node(*ib, down), config(ignore_port_patterns=["^ibp9"])) == []
    assert check_fabric(fabric_node(*ib, down), config(ignore_port_patterns=["mlx5_9/1"])) == []


def test_no_sysfs_tree_and_no_fabric_support_are_no_signal() -> None:
    assert check_fabric(node(gpu(0)), ChecksConfig()) == []
    assert check_fabric(node(gpu(0), fabric={"ib_ports": None}), ChecksConfig()) == []
    assert run_checks(node(gpu(0, fabric=None), fabric={"ib_ports": None})).status is Status.OK


def test_fewer_rdma_devices_than_configured_is_a_fault() -> None:
    snapshot = fabric_node(port("mlx5_0"), port("mlx5_1"))
    assert codes(check_fabric(snapshot, config(expected_ib_devices=3))) == ["IB_DEVICE_MISSING"]
    assert check_fabric(snapshot, config(expected_ib_devices=2)) == []


def test_fabric_manager_not_completed_or_failed_takes_the_gpu_out() -> None:
    ready = {"state": 3, "status": 0, "clique_id": 1}
    snapshot = node(
        gpu(0, fabric=ready),
        gpu(1, fabric={**ready, "state": 2}),
        gpu(2, fabric={**ready, "status": 999}),
        gpu(3, fabric=None),
    )
    findings = check_fabric(snapshot, ChecksConfig())
    assert [(f.gpu, f.code, f.action) for f in findings] == [
        (snapshot.gpus[1].uuid, "NVLINK_FABRIC_NOT_READY", Action.RESET_GPU),
        (snapshot.gpus[2].uuid, "NVLINK_FABRIC_FAILED", Action.RESET_GPU),
    ]
    assert all(f.check == "nvswitch" for f in findings)
    assert "in progress" in findings[0].message


def test_fatal_sxid_fails_and_non_fatal_warns() -> None:
    lines = (FIXTURES / "fabric" / "dmesg-mlx5-flap-sxid.txt").read_text().splitlines()
    sxids = [e.model_dump() for line in lines if (e := parse_sxid_line(line)) is not None]
    findings = check_fabric(node(gpu(0), fabric={"sxid_events": sxids}), ChecksConfig())
    assert [(f.code, f.status, f.action) for f in findings] == [
        ("NVSWITCH_SXID_FATAL", Status.FAIL, Action.DRAIN_AND_RESET),
        ("NVSWITCH_SXID_NONFATAL", Status.WARN, Action.NONE),
    ]
    assert findings[0].message == "fatal NVSwitch error(s): SXid 24007 on nvswitch0, SXid 20034 on nvswitch0"


def test_the_family_can_be_switched_off() -> None:
    snapshot = fabric_node(*(port(f"mlx5_{n}") for n in range(3)), port("mlx5_3", DOWN))
    assert check_fabric(snapshot, config(enabled=False)) == []


# --- over time ----------------------------------------------------------------------------------------


def counters(**values: int) -> dict[str, int]:
    return {"link_downed": 0, "symbol_error": 0, "port_rcv_errors": 0, **values}


def judge(
    memory: FabricMemory, snapshot: NodeSnapshot, settings: ChecksConfig | None = None
) -> tuple[list[Finding], FabricMemory]:
    return judge_fabric_trends(snapshot, settings or ChecksConfig(), memory)


def test_link_downed_rising_three_times_in_the_window_is_a_flap() -> None:
    findings, memory = judge(FabricMemory(), fabric_node(port("mlx5_0", counters=counters(link_downed=5))))
    assert findings == []  # a lifetime total is not a rate
    later = fabric_node(port("mlx5_0", counters=counters(link_downed=7)), at=T0 + timedelta(seconds=60))
    findings, memory = judge(memory, later)
    assert findings == []
    again = fabric_node(port("mlx5_0", counters=counters(link_downed=8)), at=T0 + timedelta(seconds=120))
    findings, memory = judge(memory, again)
    assert [(f.check, f.code, f.action) for f in findings] == [("infiniband", "IB_LINK_FLAP", Action.REPLACE)]
    quiet = fabric_node(port("mlx5_0", counters=counters(link_downed=8)), at=T0 + timedelta(seconds=900))
    assert judge(memory, quiet)[0] == []  # out of the 600 s window


def test_kernel_log_link_downs_count_as_flaps_of_the_port_with_that_interface() -> None:
    lines = [
        f"[Tue Mar  4 09:2{n}:31 2025] mlx5_core 0000:01:00.0 enp1s0f0np0: Link {state}"
        for n in range(3)
        for state in ("down", "up")
    ]
    events = [e.model_dump() for line in lines if (e := parse_link_line(line)) is not None]
    snapshot = fabric_node(
        port("mlx5_0", netdev="enp1s0f0np0", counters=counters()),
        port("mlx5_1", netdev="enp1s0f1np1", counters=counters()),
        link_events=events,
        at=datetime(2025, 3, 4, 9, 23, tzinfo=UTC),  # just after the lines: the downs are in the window
    )
    [finding] = judge(FabricMemory(), snapshot)[0]
    assert finding.code == "IB_LINK_FLAP" and "mlx5_0/1 (3 link downs" in finding.message
    assert "mlx5_1" not in finding.message


def test_error_counters_are_judged_as_rates_and_a_reset_counts_from_zero() -> None:
    _, memory = judge(FabricMemory(), fabric_node(port("mlx5_0", counters=counters(symbol_error=90_000))))
    step = fabric_node(port("mlx5_0", counters=counters(symbol_error=90_050)), at=T0 + timedelta(minutes=10))
    findings, memory = judge(memory, step)
    assert findings == []  # 50 in the window: under 100
    rebooted = fabric_node(port("mlx5_0", counters=counters(symbol_error=60)), at=T0 + timedelta(minutes=20))
    findings, memory = judge(memory, rebooted)
    [finding] = findings
    assert (finding.code, finding.status, finding.action) == ("IB_ERROR_RATE", Status.WARN, Action.NONE)
    assert "symbol_error +110" in finding.message
    much_later = fabric_node(
        port("mlx5_0", counters=counters(symbol_error=60)), at=T0 + timedelta(minutes=90)
    )
    assert judge(memory, much_later)[0] == []


def test_hw_counters_can_have_thresholds_too() -> None:
    settings = config(error_thresholds={"local_ack_timeout_err": 5})
    first = fabric_node(port("mlx5_0", hw_counters={"local_ack_timeout_err": 1}))
    _, memory = judge(FabricMemory(), first, settings)
    later = fabric_node(
        port("mlx5_0", hw_counters={"local_ack_timeout_err": 9}), at=T0 + timedelta(minutes=1)
    )
    assert codes(judge(memory, later, settings)[0]) == ["IB_ERROR_RATE"]


def test_a_vanished_device_is_reported_until_it_is_back() -> None:
    both = fabric_node(port("mlx5_0"), port("mlx5_1"))
    _, memory = judge(FabricMemory(), both)
    gone = fabric_node(port("mlx5_0"), at=T0 + timedelta(seconds=10))
    findings, memory = judge(memory, gone)
    assert [(f.code, f.action) for f in findings] == [("IB_DEVICE_MISSING", Action.REPLACE)]
    assert "mlx5_1" in findings[0].message
    no_tree = node(gpu(0), taken_at=T0 + timedelta(seconds=20), fabric={"ib_ports": None})
    findings, memory = judge(memory, no_tree)
    assert "mlx5_0, mlx5_1" in findings[0].message
    assert judge(memory, fabric_node(port("mlx5_0"), port("mlx5_1"), at=T0 + timedelta(seconds=30)))[0] == []


def test_trends_need_a_time_and_fabric_readings() -> None:
    memory = FabricMemory()
    assert judge(memory, node(gpu(0))) == ([], memory)
    assert judge(memory, node(gpu(0), fabric={"ib_ports": [port("mlx5_0")]})) == ([], memory)


def test_ib_port_model_keeps_the_kernels_strings() -> None:
    assert IbPort.model_validate(port("mlx5_0")).state == "4: ACTIVE"


def test_the_memory_per_port_stays_bounded_over_a_long_run() -> None:
    """A day of 10 s passes keeps at most the buckets that cover the longer window, not every reading."""
    memory = FabricMemory()
    findings: list[Finding] = []
    for step in range(8640):
        at = T0 + timedelta(seconds=10 * step)
        snapshot = fabric_node(port("mlx5_0", counters=counters(symbol_error=step)), at=at)
        findings, memory = judge(memory, snapshot)
    assert len(memory.ports["mlx5_0/1"].buckets) <= 100
    assert codes(findings) == ["IB_ERROR_RATE"]  # 360 symbol errors an hour: over 100


# --- saturated counters ------------------------------------------------------------------------------------


def test_pinned_counters_of_a_real_tree_are_reported_unknown_with_the_reason() -> None:
    """4-bit counters stop at 15, 8-bit at 255, 16-bit at 65535: their increase is 0 from then on."""
    snapshot = fabric_node(
        *(p.model_dump() for p in read_ib_ports(FIXTURES / "fabric" / "sysfs-saturated") or [])
    )
    [finding] = check_fabric(snapshot, ChecksConfig())
    assert (finding.check, finding.code, finding.status, finding.action) == (
        "infiniband",
        "IB_COUNTER_SATURATED",
        Status.UNKNOWN,
        Action.NONE,
    )
    for pinned in (
        "excessive_buffer_overrun_errors at 15 (4-bit)",
        "link_downed at 255 (8-bit)",
        "local_link_integrity_errors at 15 (4-bit)",
        "symbol_error at 65535 (16-bit)",
    ):
        assert pinned in finding.message
    assert "mlx5_0/1" in finding.message and "mlx5_1" not in finding.message
    assert run_checks(snapshot).status is Status.UNKNOWN  # never ok while a watched signal is blind


def test_a_wider_hw_counter_of_the_same_name_is_read_instead_and_still_sees_flaps() -> None:
    """counters/link_downed pinned at 255, hw_counters/link_downed (64-bit) still rising: a flap, no unknown."""
    pinned = {"link_downed": 255}
    snapshots = [
        fabric_node(
            port("mlx5_0", counters=pinned, hw_counters={"link_downed": 300 + n}),
            at=T0 + timedelta(seconds=60 * n),
        )
        for n in (0, 2, 3)
    ]
    assert check_fabric(snapshots[0], ChecksConfig()) == []
    memory = FabricMemory()
    for snapshot in snapshots:
        findings, memory = judge(memory, snapshot)
    assert codes(findings) == ["IB_LINK_FLAP"]
    without_wider = [
        fabric_node(port("mlx5_0", counters=pinned), at=T0 + timedelta(seconds=60 * n)) for n in (0, 2, 3)
    ]
    memory = FabricMemory()
    for snapshot in without_wider:
        findings, memory = judge(memory, snapshot)
    assert findings == []  # the pinned counter alone can never show the flap: hence the unknown above
    assert codes(check_fabric(without_wider[0], ChecksConfig())) == ["IB_COUNTER_SATURATED"]


def test_ib_core_port_downs_feed_the_flap_rule_of_that_device_and_port() -> None:
    """A pure InfiniBand port has no netdev: ib_core's DOWN lines count for the device and port they name."""
    lines = (FIXTURES / "fabric" / "dmesg-ib-core-port-flap.txt").read_text().splitlines()
    events = [e.model_dump() for line in lines if (e := parse_link_line(line)) is not None]
    snapshot = fabric_node(
        port("mlx5_0", counters=counters()),
        port("mlx5_1", counters=counters()),
        link_events=events,
        at=datetime(2025, 6, 11, 10, 14, 30, tzinfo=UTC),
    )
    [finding] = judge(FabricMemory(), snapshot)[0]
    assert finding.code == "IB_LINK_FLAP" and "mlx5_0/1 (3 link downs" in finding.message
    assert "mlx5_1" not in finding.message


def test_a_fatal_sxid_whose_header_line_is_missing_is_judged_from_its_severity_line() -> None:
    """A rotated or truncated log that kept only 'Severity 1 Engine instance ...': still a fatal SXid."""
    lines = (FIXTURES / "fabric" / "dmesg-sxid-headerless.txt").read_text().splitlines()
    events = [e.model_dump() for line in lines if (e := parse_sxid_line(line)) is not None]
    assert [(e["sxid"], e["severity"], e["detail_severity"]) for e in events] == [
        (24007, None, 1),
        (24007, None, None),
        (22013, "non-fatal", None),
        (22013, None, 0),
    ]
    findings = check_fabric(node(gpu(0), fabric={"sxid_events": events}), ChecksConfig())
    assert [(f.code, f.action) for f in findings] == [
        ("NVSWITCH_SXID_FATAL", Action.DRAIN_AND_RESET),
        ("NVSWITCH_SXID_NONFATAL", Action.NONE),
    ]
    assert "SXid 24007 on nvswitch0" in findings[0].message and "22013" not in findings[0].message


def test_a_severity_line_after_its_header_is_not_counted_twice() -> None:
    """With the header present the detail line stays a detail: one fatal SXid, not two."""
    lines = (FIXTURES / "fabric" / "dmesg-mlx5-flap-sxid.txt").read_text().splitlines()
    events = [e.model_dump() for line in lines if (e := parse_sxid_line(line)) is not None]
    findings = check_fabric(node(gpu(0), fabric={"sxid_events": events}), ChecksConfig())
    fatal = next(f for f in findings if f.code == "NVSWITCH_SXID_FATAL")
    assert fatal.message.count("SXid 24007") == 1


def test_a_saved_fabric_state_0_is_no_signal_and_the_health_summary_is_judged() -> None:
    """State 0 (NOT_SUPPORTED) in a saved snapshot is no signal; unhealthy fails, limited capacity warns."""
    snapshot = NodeSnapshot.model_validate_json(
        (FIXTURES / "fabric" / "snapshot-fabric-state-and-health.json").read_text()
    )
    findings = check_fabric(snapshot, ChecksConfig())
    by_gpu = {snapshot.gpus.index(g): f for f in findings for g in snapshot.gpus if g.uuid == f.gpu}
    assert sorted((pos, f.code, f.status, f.action) for pos, f in by_gpu.items()) == [
        (2, "NVLINK_FABRIC_DEGRADED", Status.WARN, Action.NONE),
        (3, "NVLINK_FABRIC_UNHEALTHY", Status.FAIL, Action.RESET_GPU),
    ]
    assert len(findings) == 2 and all(f.check == "nvswitch" for f in findings)


# --- a saved log over its own times, and windows that hold only their own events --------------------------


def test_link_downs_that_happened_long_ago_are_not_a_flap_now() -> None:
    """The trend rule counts only downs inside its window: three lines from an hour ago delivered late are
    not a flap at this reading."""
    lines = (FIXTURES / "fabric" / "dmesg-ib-core-port-flap.txt").read_text().splitlines()
    events = [e.model_dump() for line in lines if (e := parse_link_line(line)) is not None]
    late = fabric_node(
        port("mlx5_0", counters=counters()), link_events=events, at=datetime(2025, 6, 11, 11, 30, tzinfo=UTC)
    )
    assert judge(FabricMemory(), late)[0] == []


def test_a_saved_log_flaps_over_its_own_timestamps() -> None:
    """gpuhealth check --kernel-log: three link downs in 16 s are a flap, with no earlier reading at all."""
    lines = (FIXTURES / "fabric" / "dmesg-ib-core-port-flap.txt").read_text().splitlines()
    events = [e for line in lines if (e := parse_link_line(line)) is not None]
    [finding] = judge_logged_flaps(events, ChecksConfig())
    assert (finding.code, finding.action) == ("IB_LINK_FLAP", Action.REPLACE)
    assert "mlx5_0/1 (3 link downs in 16 s from 2025-06-11 10:14:02 UTC)" in finding.message
    spread = [
        e.model_copy(update={"at": e.at + timedelta(minutes=6 * n)}) for n, e in enumerate(events) if e.at
    ]
    assert judge_logged_flaps(spread, ChecksConfig()) == []  # the same downs 12 min apart: no flap


# --- the whole fabric down -----------------------------------------------------------------------------------


def test_every_ib_port_stuck_in_init_is_a_fabric_outage_without_an_expected_count() -> None:
    """No subnet manager: every InfiniBand port physically up but stuck in INIT. No sibling is up to infer
    from, and no count is configured, yet it is reported (the RoCE port is another fabric and stays out)."""
    ports = read_ib_ports(FIXTURES / "fabric" / "sysfs-no-subnet-manager") or []
    snapshot = fabric_node(*(p.model_dump() for p in ports))
    [finding] = check_fabric(snapshot, ChecksConfig())
    assert (finding.check, finding.code, finding.status, finding.action) == (
        "infiniband",
        "IB_FABRIC_DOWN",
        Status.FAIL,
        Action.REPLACE,
    )
    assert "stuck in INIT (no subnet manager?)" in finding.message
    assert "mlx5_0/1 (2: INIT / 5: LinkUp)" in finding.message and "mlx5_4" not in finding.message
    # with a count configured it is still one fabric finding, not a port-down one
    assert codes(check_fabric(snapshot, config(expected_active_ports=4))) == ["IB_FABRIC_DOWN"]
    # one port back: no longer the whole fabric
    healed = fabric_node(*(p.model_dump() for p in ports[1:]), port("mlx5_0"))
    assert "IB_FABRIC_DOWN" not in codes(check_fabric(healed, ChecksConfig()))
