"""Thermal and power slowdown (NVML clocks event reasons) and temperatures.

Bits of ``nvmlDeviceGetCurrentClocksEventReasons``: GpuIdle 0x1, ApplicationsClocksSetting 0x2, SwPowerCap
0x4, HwSlowdown 0x8, SyncBoost 0x10, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown
0x80, DisplayClockSetting 0x100. Idle, application clocks and the software power cap are normal operation
and raise nothing. NVML sets HwSlowdown together with the specific cause; when the power brake is that
cause, the finding is POWER_BRAKE alone rather than a thermal slowdown as well.
"""

from __future__ import annotations

from checks.base import gpu_finding
from checks.config import ChecksConfig, ThermalConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

CHECK = "thermal"

HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80


def check_thermal(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``THERMAL_SLOWDOWN``, ``POWER_BRAKE`` and ``TEMPERATURE_HIGH``, all warn with action none."""
    if not config.thermal.enabled:
        return []
    findings: list[Finding] = []
    for gpu in snapshot.gpus:
        findings.extend(_slowdowns(gpu, config.thermal))
        hot = _temperature(gpu, config.thermal)
        if hot is not None:
            findings.append(hot)
    return findings


def _slowdowns(gpu: GpuSnapshot, settings: ThermalConfig) -> list[Finding]:
    reasons = gpu.clocks_event_reasons
    if reasons is None:
        return []
    found: list[Finding] = []
    braking = bool(reasons & HW_POWER_BRAKE_SLOWDOWN)
    causes = [
        name
        for bit, name in (
            (SW_THERMAL_SLOWDOWN, "SW thermal slowdown (0x20)"),
            (HW_THERMAL_SLOWDOWN, "HW thermal slowdown (0x40)"),
        )
        if reasons & bit
    ]
    if reasons & HW_SLOWDOWN and not braking:
        causes.insert(0, "HW slowdown (0x8)")
    if causes and settings.warn_on_thermal_slowdown:
        detail = f"clocks reduced: {', '.join(causes)}; check cooling and airflow"
        found.append(_warn(gpu, "THERMAL_SLOWDOWN", detail))
    if braking and settings.warn_on_power_brake:
        detail = "clocks reduced by the external power brake (0x80); check power supply and BMC power capping"
        found.append(_warn(gpu, "POWER_BRAKE", detail))
    return found


def _temperature(gpu: GpuSnapshot, settings: ThermalConfig) -> Finding | None:
    hot: list[str] = []
    if gpu.temperature_c is not None and gpu.temperature_c > settings.temperature_limit_c:
        hot.append(f"GPU {gpu.temperature_c} C > {settings.temperature_limit_c} C")
    memory = gpu.memory_temperature_c
    if memory is not None and memory > settings.memory_temperature_limit_c:
        hot.append(f"memory {memory} C > {settings.memory_temperature_limit_c} C")
    if not hot:
        return None
    return _warn(gpu, "TEMPERATURE_HIGH", "temperature over limit: " + ", ".join(hot))


def _warn(gpu: GpuSnapshot, code: str, detail: str) -> Finding:
    return gpu_finding(CHECK, gpu, status=Status.WARN, code=code, detail=detail, action=Action.NONE)
