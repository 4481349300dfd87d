"""Settings of the checks: one typed, frozen model with a sub-model per check family.

Every field has a default and a one-line description (docs/checks.md is generated from them). Unknown keys
are errors, so a typo in a config file fails loudly instead of silently keeping a default.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.findings import Action
from core.settings import SettingsError, SettingsSection

DATACENTER_GPU_PATTERNS: tuple[str, ...] = (
    "A100",
    "A800",
    "A30",
    "H100",
    "H800",
    "H200",
    "H20",
    "GH200",
    "B100",
    "B200",
    "GB200",
    "B300",
    "GB300",
    "V100",
    "P100",
)
"""Model names (whole words of the NVML name) of data-centre GPUs that ship with ECC on."""


BRIDGE_OPTIONAL_PATTERNS: tuple[str, ...] = (
    "PCIe",
    "NVL",
    "L4",
    "L20",
    "L40",
    "L40S",
    "A2",
    "A10",
    "A10G",
    "A16",
    "A30",
    "A40",
    "T4",
    "RTX",
    "Quadro",
    "GeForce",
    "TITAN",
)
"""Words of the NVML name of boards whose NVLink, if any, comes from optional bridges (or does not exist):
NVML reports their unbridged links as inactive, which is their normal state, not a fault."""


class ConfigError(SettingsError):
    """Invalid checks configuration; the message is one line naming the bad field."""


class _CheckFamily(SettingsSection):
    """The settings of one check family, which can be turned off."""

    enabled: bool = Field(default=True, description="Run this check family.")


class XidConfig(_CheckFamily):
    """XID events judged with NVIDIA's catalogue and workflows (checks/xid.py)."""

    overrides: dict[int, Action] = Field(
        default_factory=dict,
        description="XID -> action that replaces the catalogue's, e.g. {79: reboot}; none mutes the XID.",
    )
    unknown_action: Action = Field(
        default=Action.REPLACE,
        description="Action for an XID not in the catalogue (and NVML's 999): CONTACT_SUPPORT-level.",
    )
    app_error_repeat_threshold: int = Field(
        default=3, ge=1, description="XID 13 / 31 seen this many times on one GPU: recommend diagnostics."
    )
    app_error_repeat_action: Action = Field(
        default=Action.RESTART_APP, description="Action for XID 13 / 31 once they repeat as above."
    )
    xid64_repeat_threshold: int = Field(
        default=2, ge=1, description="XID 64 seen this many times on one GPU: escalate past a GPU reset."
    )
    xid64_repeat_action: Action = Field(
        default=Action.REPLACE, description="Action for XID 64 once it repeats (NVIDIA: contact support)."
    )


class EccConfig(_CheckFamily):
    """ECC counters and mode (checks/memory.py)."""

    aggregate_dbe_warn_threshold: int = Field(
        default=1, ge=1, description="Lifetime uncorrectable count that warns when none is volatile."
    )
    warn_when_disabled: bool = Field(default=True, description="Warn when ECC is off on a data-centre GPU.")
    datacenter_gpu_patterns: tuple[str, ...] = Field(
        default=DATACENTER_GPU_PATTERNS, description="Words of the GPU name that mark a data-centre GPU."
    )


class RowRemapConfig(_CheckFamily):
    """Row remapping, Ampere and newer (checks/memory.py)."""

    uncorrectable_warn_threshold: int = Field(
        default=8, ge=1, description="Rows remapped for uncorrectable errors that warn (one bank holds 8)."
    )
    uncorrectable_replace_threshold: int = Field(
        default=512,
        ge=1,
        description="Rows remapped for uncorrectable errors that mean replace (NVIDIA: 512).",
    )


class RetiredPagesConfig(_CheckFamily):
    """Dynamic page retirement, before Ampere (checks/memory.py)."""

    total_replace_threshold: int = Field(
        default=60, ge=1, description="Single- plus double-bit retired pages that mean replace (DCGM: 60)."
    )
    double_bit_warn_threshold: int = Field(
        default=15, ge=1, description="Double-bit retired pages that warn (DCGM's soft limit: 15)."
    )


class PresenceConfig(_CheckFamily):
    """NVML reachable, GPUs present, not lost, readable (checks/presence.py)."""

    lost_action: Action = Field(default=Action.REBOOT, description="Action for a GPU NVML reports as lost.")
    missing_action: Action = Field(
        default=Action.REBOOT, description="Action when fewer GPUs are visible than expected."
    )


class PcieConfig(_CheckFamily):
    """PCIe link width, generation and replays (checks/pcie.py)."""

    width_degraded_action: Action = Field(
        default=Action.NONE, description="Action when the link runs narrower than its maximum width."
    )
    warn_on_gen_below_max: bool = Field(
        default=False, description="Also warn when the generation is below max (normal power saving at idle)."
    )
    replay_warn_threshold: int = Field(
        default=1000, ge=1, description="PCIe replay counter (cumulative since driver load) that warns."
    )


class NvlinkConfig(_CheckFamily):
    """NVLink state and error counters (checks/nvlink.py)."""

    down_action: Action = Field(default=Action.RESET_GPU, description="Action when a link reports inactive.")
    bridge_optional_patterns: tuple[str, ...] = Field(
        default=BRIDGE_OPTIONAL_PATTERNS,
        description="Words of the GPU name of PCIe-style boards, whose inactive links raise no NVLINK_DOWN.",
    )
    replay_warn_threshold: int = Field(default=100, ge=1, description="Replay errors on one link that warn.")
    recovery_warn_threshold: int = Field(
        default=1, ge=1, description="Recovery errors on one link that warn."
    )
    crc_warn_threshold: int = Field(default=100, ge=1, description="CRC errors on one link that warn.")


class ThermalConfig(_CheckFamily):
    """Clock slowdown reasons and temperatures (checks/thermal.py)."""

    temperature_limit_c: int = Field(default=85, description="GPU temperature above this warns (degrees C).")
    memory_temperature_limit_c: int = Field(
        default=95, description="Memory (HBM) temperature above this warns (degrees C)."
    )
    warn_on_thermal_slowdown: bool = Field(
        default=True, description="Warn on HwSlowdown 0x8, SwThermal 0x20, HwThermal 0x40."
    )
    warn_on_power_brake: bool = Field(default=True, description="Warn on HwPowerBrake 0x80.")


class RecoveryActionConfig(_CheckFamily):
    """NVML's GPU recovery action field (checks/recovery_action.py)."""

    overrides: dict[int, Action] = Field(
        default_factory=dict,
        description="Action for a field value, e.g. a newer driver's 7 (system reboot): {7: reboot}.",
    )


class PersistenceConfig(_CheckFamily):
    """Persistence mode (checks/persistence.py); off by default, see docs/checks.md."""

    enabled: bool = Field(
        default=False, description="Run this check family (off by default: see docs/checks.md)."
    )


class FabricConfig(_CheckFamily):
    """InfiniBand / RoCE ports, the GPUs' NVLink fabric and NVSwitch SXids (checks/fabric.py)."""

    expected_active_ports: int | None = Field(
        default=None,
        ge=0,
        description="IB / RoCE ports that must be ACTIVE / LinkUp; unset: inferred from sibling ports.",
    )
    infer_from_siblings: bool = Field(
        default=True,
        description="Unset expected count: a port down while more of its link-layer siblings are up is down.",
    )
    ignore_port_patterns: tuple[str, ...] = Field(
        default=(),
        description="Regexes on '<device>/<port>' or the netdev of ports to leave out (uncabled management).",
    )
    expected_ib_devices: int | None = Field(
        default=None, ge=0, description="RDMA devices the node must list; unset: only a vanished one counts."
    )
    port_down_action: Action = Field(
        default=Action.REPLACE, description="Action for a port down (cable, optic or HCA: a technician)."
    )
    device_missing_action: Action = Field(
        default=Action.REPLACE, description="Action for an RDMA device that vanished or is missing."
    )
    flap_window_s: float = Field(
        default=600.0, gt=0, description="Window in which link downs of one port are counted (seconds)."
    )
    flap_threshold: int = Field(
        default=3, ge=1, description="Link downs of one port in the window that make it flapping."
    )
    flap_action: Action = Field(default=Action.REPLACE, description="Action for a flapping port.")
    error_window_s: float = Field(
        default=3600.0, gt=0, description="Window over which error-counter increases are summed (seconds)."
    )
    error_thresholds: dict[str, int] = Field(
        default_factory=lambda: {
            "symbol_error": 100,
            "link_error_recovery": 10,
            "port_rcv_errors": 100,
            "local_link_integrity_errors": 10,
            "excessive_buffer_overrun_errors": 10,
            "port_xmit_discards": 1000,
        },
        description="Counter -> increase within the window that is over threshold (hw_counters names too).",
    )
    error_rate_action: Action = Field(
        default=Action.NONE, description="Action for error counters over threshold (warn: a degrading link)."
    )
    fabric_manager_action: Action = Field(
        default=Action.RESET_GPU,
        description="Action for a GPU whose NVLink fabric registration is not completed or failed.",
    )
    sxid_fatal_action: Action = Field(
        default=Action.DRAIN_AND_RESET,
        description="Action for a fatal NVSwitch SXid (NVIDIA: reset the GPUs and switches).",
    )


class ChecksConfig(BaseModel):
    """All check settings; ``ChecksConfig()`` is the documented default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    xid: XidConfig = Field(default_factory=XidConfig, description="XID events.")
    ecc: EccConfig = Field(default_factory=EccConfig, description="ECC errors and mode.")
    row_remap: RowRemapConfig = Field(default_factory=RowRemapConfig, description="Row remapping.")
    retired_pages: RetiredPagesConfig = Field(
        default_factory=RetiredPagesConfig, description="Page retirement."
    )
    presence: PresenceConfig = Field(default_factory=PresenceConfig, description="NVML and GPU presence.")
    pcie: PcieConfig = Field(default_factory=PcieConfig, description="PCIe link.")
    nvlink: NvlinkConfig = Field(default_factory=NvlinkConfig, description="NVLink links.")
    thermal: ThermalConfig = Field(default_factory=ThermalConfig, description="Thermal and power slowdown.")
    recovery_action: RecoveryActionConfig = Field(
        default_factory=RecoveryActionConfig, description="NVML recovery action."
    )
    persistence: PersistenceConfig = Field(default_factory=PersistenceConfig, description="Persistence mode.")
    fabric: FabricConfig = Field(
        default_factory=FabricConfig, description="InfiniBand / RoCE, NVLink fabric, NVSwitch."
    )

    @classmethod
    def from_mapping(cls, data: Mapping[str, object] | None) -> ChecksConfig:
        """Build from a parsed YAML / JSON mapping; ``None`` (an empty file) means all defaults.

        A family left empty in YAML (``xid:`` with every key commented out) parses as ``None`` and means
        that family's defaults. Raises :class:`ConfigError` with one line naming the first bad field.
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError(f"checks config: expected a mapping, got {type(data).__name__}")
        sections = {key: value for key, value in data.items() if value is not None}
        try:
            return cls.model_validate(sections)
        except ValidationError as exc:
            raise ConfigError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    """The first validation error as ``checks config: <dotted.field>: <problem>`` (+ how many more)."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    problem = str(first["msg"]).splitlines()[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"checks config: {where}: {problem}{more}"
