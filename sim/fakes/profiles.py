"""GPU models as the fake NVML presents them: one :class:`GpuProfile` per model and driver.

The figures (names, PCI device ids, board bus layouts, drivers, limits, which NVML features answer) are
those real nodes report; ``docs/snapshot.md`` tabulates them. Add a profile to :data:`PROFILES` to extend
:class:`sim.fakes.nvml.FakeNvml`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class GpuProfile:
    """What one GPU model on one driver looks like through NVML. Add a profile to PROFILES to extend."""

    key: str
    name: str  # nvmlDeviceGetName, exactly as the driver spells it
    default_gpu_count: int
    bus_numbers: tuple[int, ...]  # PCI bus of each GPU in enumeration order (HGX / DGX board layouts)
    pci_device_id: int  # nvmlPciInfo_t.pciDeviceId: (device << 16) | vendor 0x10DE
    driver_version: str
    power_limit_w: int
    idle_power_w: tuple[int, int]
    pcie_gen: int
    pcie_width: int
    nvlink_links: int  # 0 = PCIe board without NVLink
    row_remapping: bool  # Ampere and newer
    page_retirement: bool  # before Ampere
    recovery_action_field: bool  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION known to the driver
    memory_temperature: bool  # NVML_FI_DEV_MEMORY_TEMP answers
    gpu_fabric: bool = False  # nvmlDeviceGetGpuFabricInfo answers (NVSwitch baseboards with Fabric Manager)
    max_sm_clock_mhz: int = 1980  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)
    idle_sm_clock_mhz: int = 345  # the SM clock an idle GPU parks at
    vbios_version: str = "96.00.99.00.01"  # nvmlDeviceGetVbiosVersion
    missing_functions: frozenset[str] = frozenset()  # absent from this driver's libnvidia-ml


_HGX_BUSES: Final[tuple[int, ...]] = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

PROFILES: Final[dict[str, GpuProfile]] = {
    profile.key: profile
    for profile in (
        GpuProfile(
            key="h100_sxm",
            name="NVIDIA H100 80GB HBM3",
            default_gpu_count=8,
            bus_numbers=_HGX_BUSES,
            pci_device_id=0x233010DE,
            driver_version="580.95.05",
            power_limit_w=700,
            idle_power_w=(68, 75),
            pcie_gen=5,
            pcie_width=16,
            nvlink_links=18,
            row_remapping=True,
            page_retirement=False,
            recovery_action_field=True,
            memory_temperature=True,
            gpu_fabric=True,
        ),
        GpuProfile(
            key="h200_sxm",
            name="NVIDIA H200",
            default_gpu_count=8,
            bus_numbers=_HGX_BUSES,
            pci_device_id=0x233510DE,
            driver_version="580.95.05",
            power_limit_w=700,
            idle_power_w=(74, 82),
            pcie_gen=5,
            pcie_width=16,
            nvlink_links=18,
            row_remapping=True,
            page_retirement=False,
            recovery_action_field=True,
            memory_temperature=True,
            gpu_fabric=True,
        ),
        GpuProfile(
            key="a100_pcie",
            name="NVIDIA A100 80GB PCIe",
            default_gpu_count=4,
            bus_numbers=(0x17, 0x65, 0xCA, 0xE3, 0x31, 0x4B, 0xB1, 0x98),
            pci_device_id=0x20B510DE,
            driver_version="570.172.08",
            power_limit_w=300,
            idle_power_w=(42, 50),
            max_sm_clock_mhz=1410,
            idle_sm_clock_mhz=210,
            pcie_gen=4,
            pcie_width=16,
            nvlink_links=0,
            row_remapping=True,
            page_retirement=False,
            recovery_action_field=True,
            memory_temperature=True,
        ),
        GpuProfile(
            key="v100_sxm2",
            name="Tesla V100-SXM2-32GB",
            default_gpu_count=8,
            bus_numbers=(0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A),
            pci_device_id=0x1DB510DE,
            driver_version="535.274.02",
            power_limit_w=300,
            idle_power_w=(40, 46),
            max_sm_clock_mhz=1530,
            idle_sm_clock_mhz=135,
            pcie_gen=3,
            pcie_width=16,
            nvlink_links=6,
            row_remapping=False,
            page_retirement=True,
            recovery_action_field=False,
            memory_temperature=False,
            missing_functions=frozenset({"nvmlDeviceGetTemperatureV"}),
        ),
    )
}
