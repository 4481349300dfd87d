"""The fake NVML's load and slow-GPU faults, read through the real NVML backend."""

from __future__ import annotations

from agent.backends.nvml.backend import NvmlBackend
from sim.fakes.nvml import FakeNvml


def _read(fake: FakeNvml) -> dict[int, tuple[int | None, ...]]:
    with NvmlBackend(node_name=fake.node_name, library=fake) as backend:
        snapshot = backend.snapshot()
    return {
        gpu.index: (
            gpu.sm_clock_mhz,
            gpu.utilization_pct,
            round(gpu.power_w or 0),
            gpu.clocks_event_reasons,
            gpu.pcie.gen if gpu.pcie else None,
            gpu.pcie.width if gpu.pcie else None,
            gpu.max_sm_clock_mhz,
        )
        for gpu in snapshot.gpus
    }


def test_a_busy_gpu_runs_near_its_maximum_clock_and_an_idle_one_parks() -> None:
    fake = FakeNvml(seed=1, node_name="n1")
    fake.run_load(0, busy=True, intensity=1.0)
    busy = _read(fake)
    assert all((clock or 0) > 0.8 * 1980 for clock, *_ in busy.values())
    assert all((utilization or 0) >= 88 for _, utilization, *_ in busy.values())
    assert {gen for *_, gen, _w, _m in busy.values()} == {5}
    fake.run_load(1, busy=False)
    idle = _read(fake)
    assert {(clock, gen, reasons) for clock, _u, _p, reasons, gen, _w, _m in idle.values()} == {(345, 1, 1)}


def test_the_same_step_repeats_and_another_step_varies() -> None:
    one, two = FakeNvml(seed=3, node_name="n"), FakeNvml(seed=3, node_name="n")
    one.run_load(5, intensity=0.9)
    two.run_load(5, intensity=0.9)
    assert _read(one) == _read(two)
    two.run_load(6, intensity=0.9)
    assert _read(one) != _read(two)


def test_slow_gpu_faults_stay_through_every_load_step() -> None:
    fake = FakeNvml(seed=2, node_name="n2")
    fake.train_down_link(1, gen=3)
    fake.throttle_silently(2, factor=0.6)
    fake.slow_at_full_power(3, factor=0.6)
    for step in range(3):
        fake.run_load(step, intensity=1.0)
        gpus = _read(fake)
        healthy_clock = gpus[0][0] or 0
        assert gpus[1][4:6] == (3, 16)
        clock, _u, power, reasons, *_ = gpus[2]
        assert clock is not None and clock < 0.7 * healthy_clock
        assert reasons == 0 and (power or 0) < 600
        clock, _u, power, reasons, *_ = gpus[3]
        assert clock is not None and clock < 0.7 * healthy_clock
        assert power == 700 and reasons == 4
