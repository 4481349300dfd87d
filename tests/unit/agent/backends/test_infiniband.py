"""The sysfs reader of InfiniBand / RoCE ports, on a real-format tree and on the fake tree's faults."""

from __future__ import annotations

from pathlib import Path

from repo_paths import FIXTURES

from agent.backends.infiniband import read_ib_ports
from sim.fakes.infiniband import FakeInfiniband

TREE = FIXTURES / "fabric" / "sysfs-hgx"


def test_a_real_format_tree_is_read_as_the_kernel_spells_it() -> None:
    ports = read_ib_ports(TREE)
    assert ports is not None
    assert [(p.device, p.port, p.state, p.phys_state, p.link_layer) for p in ports] == [
        ("mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand"),
        ("mlx5_1", 1, "1: DOWN", "3: Disabled", "InfiniBand"),
        ("mlx5_2", 1, "4: ACTIVE", "5: LinkUp", "InfiniBand"),
        ("mlx5_3", 1, "4: ACTIVE", "5: LinkUp", "Ethernet"),
    ]
    first = ports[0]
    assert first.rate == "400 Gb/sec (4X NDR)"
    assert first.counters is not None and first.counters["symbol_error"] == 17
    assert first.counters["link_downed"] == 2
    assert "port_xmit_data" not in first.counters  # traffic, not health
    assert first.hw_counters == {"local_ack_timeout_err": 3, "out_of_sequence": 0, "rnr_nak_retry_err": 0}
    assert ports[1].hw_counters is None  # no hw_counters directory: null, not empty
    assert ports[2].counters is not None and "excessive_buffer_overrun_errors" not in ports[2].counters
    assert ports[3].netdev == "ens8f0np0"


def test_a_node_without_the_sysfs_tree_has_no_ports_reading(tmp_path: Path) -> None:
    assert read_ib_ports(tmp_path / "absent") is None
    (tmp_path / "empty").mkdir()
    assert read_ib_ports(tmp_path / "empty") == []


def test_the_fake_tree_shows_each_fault_as_sysfs_would(tmp_path: Path) -> None:
    fake = FakeInfiniband(tmp_path / "ib", devices=3)
    fake.port_down("mlx5_0")
    fake.flap("mlx5_1", times=2)
    fake.add_errors("mlx5_2", "symbol_error", 40)
    ports = {p.device: p for p in read_ib_ports(tmp_path / "ib") or []}
    assert (ports["mlx5_0"].state, ports["mlx5_0"].phys_state) == ("1: DOWN", "3: Disabled")
    assert ports["mlx5_1"].counters is not None and ports["mlx5_1"].counters["link_downed"] == 2
    assert ports["mlx5_2"].counters is not None and ports["mlx5_2"].counters["symbol_error"] == 40
    fake.reset_counters("mlx5_2")
    fake.remove_device("mlx5_1")
    ports = {p.device: p for p in read_ib_ports(tmp_path / "ib") or []}
    assert sorted(ports) == ["mlx5_0", "mlx5_2"]
    assert ports["mlx5_2"].counters is not None and ports["mlx5_2"].counters["symbol_error"] == 0
    fake.heal()
    ports = {p.device: p for p in read_ib_ports(tmp_path / "ib") or []}
    assert sorted(ports) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert all(p.state == "4: ACTIVE" and p.phys_state == "5: LinkUp" for p in ports.values())
