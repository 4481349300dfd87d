"""The mutable state of one fake GPU (:class:`FakeGpu`) and how a new one is made (:func:`new_gpu`).

Every GPU starts healthy and idle, with small deterministic differences (temperature, power, a few
corrected ECC errors) fixed by seed, node name and slot, so that fleets look varied yet tests repeat.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

from agent.backends.nvml import seam as nvml
from sim.fakes.profiles import GpuProfile

# Clocks event reason bits (nvmlClocksEventReason*), by the names throttle() accepts.
CLOCKS_EVENT_REASONS: Final[dict[str, int]] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}


@dataclass
class FakeLink:
    """One NVLink link of a fake GPU: whether it is up, and its error counters."""

    active: bool = True
    replay: int = 0
    recovery: int = 0
    crc_flit: int = 0
    crc_data: int = 0


@dataclass
class FakeGpu:
    """The mutable state of one fake GPU. Change it through FakeNvml's methods (they hold the lock)."""

    slot: int
    uuid: str
    bus_number: int
    temperature_c: int
    memory_temperature_c: int
    power_mw: int
    power_limit_mw: int
    pcie_gen: int
    pcie_width: int
    links: list[FakeLink]
    persistence_mode: bool = True
    clocks_event_reasons: int = CLOCKS_EVENT_REASONS["gpu_idle"]
    sm_clock_mhz: int = 345
    max_sm_clock_mhz: int = 1980
    utilization_pct: int = 0
    # Slow-GPU faults (sim/fakes/load.py honours them at every load step): the link trains no higher than
    # this (gen, width); clocks reach only this share of a healthy GPU's; the reason bits are hidden.
    link_ceiling: tuple[int, int] | None = None
    clock_factor: float = 1.0
    hide_clock_reasons: bool = False
    pin_power_at_limit: bool = False
    ecc_enabled: bool = True
    # ECC counters by (memory error type, counter type)
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    retired_single_bit: int = 0
    retired_double_bit: int = 0
    retirement_pending: bool = False
    pcie_replays: int = 0
    recovery_action: int = 0
    fabric_state: int = nvml.NVML_GPU_FABRIC_STATE_COMPLETED  # when the profile has a GPU fabric
    fabric_status: int = nvml.NVML_SUCCESS
    fabric_clique: int = 1
    fabric_health: int = 0  # NVML_GPU_FABRIC_HEALTH_SUMMARY_*: 0 not reported (drivers before GB200-class)
    mig_enabled: bool = False
    lost: bool = False
    lookup_fails_when_lost: bool = True
    enumerated: bool = True
    failing_code: int | None = None  # every query raises this code
    call_errors: dict[str, int] = field(default_factory=dict)  # one query raises a code
    processes: dict[int, int] = field(default_factory=dict)  # compute process pid -> GPU memory in bytes

    @property
    def pci_bus_id(self) -> str:
        """NVML's spelling: 8-digit domain, upper-case hex, function number."""
        return f"00000000:{self.bus_number:02X}:00.0"

    @property
    def serial(self) -> str:
        """The board serial, 13 digits as NVIDIA prints them, fixed by the UUID."""
        return str(1650000000000 + int(self.uuid.removeprefix("GPU-")[:8], 16) % 10**9)


def _stable_int(key: str, low: int, high: int) -> int:
    """A number in [low, high] fixed by ``key``: deterministic variety without a random generator."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return low + digest % (high - low + 1)


def fake_uuid(seed: object, node_name: str, slot: int) -> str:
    """The UUID the fake gives a GPU: ``GPU-`` and 8-4-4-4-12 hex digits, fixed by seed, node and slot."""
    digest = hashlib.sha256(f"{seed}/{node_name}/{slot}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _bus_number(profile: GpuProfile, slot: int) -> int:
    if slot < len(profile.bus_numbers):
        return profile.bus_numbers[slot]
    return 0xC0 + slot  # beyond the board layout: still distinct on this node


def new_gpu(profile: GpuProfile, seed: object, node_name: str, slot: int) -> FakeGpu:
    """A healthy, idle GPU in ``slot`` of ``profile``, its small differences fixed by seed, node and slot."""
    key = f"{seed}/{node_name}/{slot}"
    temperature = _stable_int(key + "/t", 29, 38)
    return FakeGpu(
        slot=slot,
        uuid=fake_uuid(seed, node_name, slot),
        bus_number=_bus_number(profile, slot),
        temperature_c=temperature,
        memory_temperature_c=temperature + _stable_int(key + "/m", 1, 5),
        power_mw=_stable_int(key + "/p", profile.idle_power_w[0] * 1000, profile.idle_power_w[1] * 1000),
        power_limit_mw=profile.power_limit_w * 1000,
        pcie_gen=profile.pcie_gen,
        pcie_width=profile.pcie_width,
        sm_clock_mhz=profile.idle_sm_clock_mhz,
        max_sm_clock_mhz=profile.max_sm_clock_mhz,
        links=[FakeLink() for _ in range(profile.nvlink_links)],
        ecc={
            (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC): 0,
            (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC): _stable_int(key + "/sbe", 0, 3),
            (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC): 0,
            (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC): 0,
        },
    )
