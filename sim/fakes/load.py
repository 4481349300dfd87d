"""Healthy load with realistic noise, and the slow-GPU faults, for the fake NVML.

A synchronous training job keeps every GPU of a node busy to the same degree; across a fleet the GPUs of one
model still differ: silicon (the clock a GPU holds at its power cap varies by a few percent), cooling (a
few degrees between slots and racks), the job's intensity from one step to the next, and the occasional
PCIe replay. An idle GPU parks its clocks, draws idle power and lets its PCIe link drop to Gen1 to save
power, as real boards do. :func:`apply_load` sets one GPU's readings for one step of that life; the noise is
fixed by a key (seed, node, slot) and the step, so a run repeats.

The slow-GPU faults are fields of :class:`~sim.fakes.gpu.FakeGpu` that every step honours: a link that
trains no higher than a ceiling, clocks that reach only a share of a healthy GPU's (with the reason bits
shown or hidden), and power pinned at the limit while the clocks stay low.
"""

from __future__ import annotations

import hashlib
import random

from sim.fakes.gpu import CLOCKS_EVENT_REASONS, FakeGpu
from sim.fakes.profiles import GpuProfile


def _random(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))  # noqa: S311 -- noise, not secrets


def apply_load(
    gpu: FakeGpu, profile: GpuProfile, key: str, step: int, *, busy: bool, intensity: float
) -> None:
    """Set ``gpu``'s readings for one step: busy at ``intensity`` (0.5-1.0, the node's job), or idle."""
    fixed = _random(key, "silicon")
    silicon = fixed.uniform(-0.03, 0.03)  # clock held at the power cap, this GPU against a typical one
    cooling = fixed.uniform(-4.0, 4.0)  # °C, this slot's airflow
    noise = _random(key, step)
    ceiling_gen, ceiling_width = gpu.link_ceiling or (profile.pcie_gen, profile.pcie_width)
    gpu.pcie_width = min(profile.pcie_width, ceiling_width)
    if not busy:
        gpu.utilization_pct = 0
        gpu.power_mw = round(noise.uniform(*profile.idle_power_w) * 1000)
        gpu.sm_clock_mhz = profile.idle_sm_clock_mhz
        gpu.clocks_event_reasons = CLOCKS_EVENT_REASONS["gpu_idle"]
        gpu.pcie_gen = 1
    else:
        limit = profile.power_limit_w
        idle = sum(profile.idle_power_w) / 2
        wanted = idle + intensity * (limit * 1.08 - idle) * noise.uniform(0.97, 1.03)
        capped = wanted >= limit
        power = float(limit) if capped or gpu.pin_power_at_limit else wanted
        if not gpu.pin_power_at_limit:
            power *= gpu.clock_factor  # a GPU held to lower clocks draws less
        healthy_clock = profile.max_sm_clock_mhz * (
            (noise.uniform(0.88, 0.95) + silicon) if capped else noise.uniform(0.97, 1.0)
        )
        gpu.utilization_pct = noise.randint(88, 100)
        gpu.power_mw = round(power * 1000)
        gpu.sm_clock_mhz = round(min(profile.max_sm_clock_mhz, healthy_clock) * gpu.clock_factor)
        at_cap = (capped and gpu.clock_factor == 1.0) or gpu.pin_power_at_limit
        reasons = CLOCKS_EVENT_REASONS["sw_power_cap"] if at_cap else 0
        gpu.clocks_event_reasons = 0 if gpu.hide_clock_reasons else reasons
        gpu.pcie_gen = min(profile.pcie_gen, ceiling_gen)
    watts = gpu.power_mw / 1000
    gpu.temperature_c = round(27 + cooling + watts * 0.057 + noise.uniform(-1.5, 1.5))
    gpu.memory_temperature_c = gpu.temperature_c + 3
    if noise.random() < 0.01:
        gpu.pcie_replays += 1
