"""bench.all: which benchmarks a mode runs, and how the 5,000- and 10,000-node fleets are asked for."""

from __future__ import annotations

import pytest

import bench.all as bench_all


def _ran(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[str]:
    ran: list[str] = []

    def fake_run(bench: bench_all.Benchmark, *, quick: bool) -> dict[str, object]:
        ran.append(bench.name)
        return {"quick": quick}

    monkeypatch.setattr(bench_all, "run_benchmark", fake_run)
    monkeypatch.setattr(bench_all, "_previous_figures", dict)
    assert bench_all.main([*argv, "--print"]) == 0
    return ran


def test_the_quick_mode_leaves_out_full_only_benchmarks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    quick = _ran(monkeypatch, ["--quick"])
    full = _ran(monkeypatch, [])
    assert "fleet_scale_5000" not in quick
    assert "fleet_scale_5000" in full
    assert set(full) - set(quick) == {b.name for b in bench_all.BENCHMARKS if b.full_only}
    capsys.readouterr()


def test_a_full_only_benchmark_still_runs_when_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _ran(monkeypatch, ["--quick", "--only", "fleet_scale_5000"]) == ["fleet_scale_5000"]
    capsys.readouterr()


def test_the_5000_node_fleet_is_the_fleet_scale_module_with_its_size_and_a_longer_timeout() -> None:
    by_name = {b.name: b for b in bench_all.BENCHMARKS}
    five = by_name["fleet_scale_5000"]
    assert five.command == ["-m", "bench.fleet_scale", "--json", "--nodes", "5000"]
    assert five.timeout_s > 2715  # the run of 2026-12-05 took 2,715 s


def test_the_10000_node_fleet_leaves_out_the_drains_and_has_time_for_its_hour() -> None:
    by_name = {b.name: b for b in bench_all.BENCHMARKS}
    ten = by_name["fleet_scale_10000"]
    assert ten.command == ["-m", "bench.fleet_scale", "--json", "--nodes", "10000", "--no-drain"]
    assert ten.full_only
    assert ten.timeout_s > 3569  # the run of 2026-12-05 took 3,569 s
