"""One injected GPU fault -> the matching ``FakeNvml`` fault method (one kind per method)."""

from __future__ import annotations

from agent.backends.fake_nvml import FakeNvml
from sim.scenario.model import (
    ClearFault,
    DegradePcieFault,
    EccDbeFault,
    EccSbeFault,
    GpuFault,
    LoseGpuFault,
    NvlinkDownFault,
    NvlinkErrorsFault,
    PcieReplaysFault,
    RecoveryActionFault,
    RemoveGpuFault,
    RetiredPagesFault,
    RowRemapFault,
    TemperatureFault,
    ThrottleFault,
    XidFault,
)


def apply_gpu_fault(nvml: FakeNvml, gpu: int, fault: GpuFault) -> None:  # noqa: PLR0912 - one branch per kind
    """Inject ``fault`` on GPU ``gpu`` of one node's fake NVML."""
    match fault:
        case XidFault():
            nvml.inject_xid(gpu, fault.xid, fault.message)
        case EccDbeFault():
            nvml.set_ecc_dbe(gpu, volatile=fault.volatile)
        case EccSbeFault():
            nvml.set_ecc_sbe(gpu, volatile=fault.volatile)
        case RowRemapFault():
            nvml.set_row_remap(
                gpu,
                pending=fault.pending,
                failure=fault.failure,
                uncorrectable=fault.uncorrectable,
                correctable=fault.correctable,
            )
        case RetiredPagesFault():
            nvml.set_retired_pages(
                gpu, double_bit=fault.double_bit, single_bit=fault.single_bit, pending=fault.pending
            )
        case LoseGpuFault():
            nvml.lose_gpu(gpu, emit_xid=fault.emit_xid)
        case RemoveGpuFault():
            nvml.remove_gpu(gpu)
        case DegradePcieFault():
            nvml.degrade_pcie(gpu, width=fault.width, gen=fault.gen)
        case PcieReplaysFault():
            nvml.add_pcie_replays(gpu, fault.count)
        case NvlinkDownFault():
            nvml.nvlink_down(gpu, fault.link)
        case NvlinkErrorsFault():
            nvml.add_nvlink_errors(
                gpu, fault.link, replay=fault.replay, recovery=fault.recovery, crc=fault.crc
            )
        case ThrottleFault():
            nvml.throttle(gpu, *fault.reasons)
        case RecoveryActionFault():
            nvml.set_recovery_action(gpu, fault.action)
        case TemperatureFault():
            nvml.set_temperature(gpu, gpu_c=fault.gpu_c, memory_c=fault.memory_c)
        case ClearFault():
            nvml.clear_faults(gpu)


def describe_fault(fault: GpuFault) -> str:
    """A few words for the timeline view."""
    match fault:
        case XidFault():
            return f"XID {fault.xid}"
        case ThrottleFault():
            return f"throttle ({', '.join(fault.reasons)})"
        case RowRemapFault():
            flags = [name for name in ("pending", "failure") if getattr(fault, name)]
            return f"row remap {' '.join(flags) or 'counts'}".strip()
        case _:
            return fault.kind.replace("_", " ")
