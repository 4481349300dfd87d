"""One injected GPU or fabric fault -> the matching ``FakeNvml`` / ``FakeInfiniband`` fault method."""

from __future__ import annotations

from agent.backends.nvml import seam as nvml_codes
from sim.fakes.infiniband import DISABLED, POLLING, FakeInfiniband
from sim.fakes.nvml import FakeNvml
from sim.scenario.model import (
    ClearFault,
    DegradePcieFault,
    EccDbeFault,
    EccSbeFault,
    FabricManagerFault,
    GpuFault,
    IbDeviceGoneFault,
    IbErrorsFault,
    IbFlapFault,
    IbPortDownFault,
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

IbFault = IbPortDownFault | IbFlapFault | IbErrorsFault | IbDeviceGoneFault

_FABRIC_STATES = {
    "failed": nvml_codes.NVML_GPU_FABRIC_STATE_COMPLETED,
    "not_started": nvml_codes.NVML_GPU_FABRIC_STATE_NOT_STARTED,
    "in_progress": nvml_codes.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
}


class FabricFaultError(ValueError):
    """An InfiniBand fault on a node without fake InfiniBand ports (fleet.ib_ports is 0 or too small)."""


def apply_fault(nvml: FakeNvml, infiniband: FakeInfiniband | None, gpu: int, fault: GpuFault) -> None:
    """Inject ``fault`` on one node: its GPU ``gpu`` (fake NVML) or its fake InfiniBand tree."""
    if isinstance(fault, IbPortDownFault | IbFlapFault | IbErrorsFault | IbDeviceGoneFault):
        _apply_ib_fault(infiniband, fault)
        return
    if isinstance(fault, ClearFault) and infiniband is not None:
        infiniband.heal()
    apply_gpu_fault(nvml, gpu, fault)


def _apply_ib_fault(infiniband: FakeInfiniband | None, fault: IbFault) -> None:
    if infiniband is None or fault.port >= len(infiniband.devices):
        raise FabricFaultError(f"{fault.kind}: the node has no InfiniBand port {fault.port} (fleet.ib_ports)")
    device = infiniband.devices[fault.port]
    match fault:
        case IbPortDownFault():
            infiniband.port_down(device, phys_state=DISABLED if fault.phys_state == "disabled" else POLLING)
        case IbFlapFault():
            infiniband.flap(device, fault.times)
        case IbErrorsFault():
            infiniband.add_errors(device, fault.counter, fault.count)
        case IbDeviceGoneFault():
            infiniband.remove_device(device)


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
        case FabricManagerFault():
            status = nvml_codes.NVML_ERROR_UNKNOWN if fault.state == "failed" else nvml_codes.NVML_SUCCESS
            nvml.fail_fabric(gpu, state=_FABRIC_STATES[fault.state], status=status)
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
        case IbFlapFault():
            return f"IB port {fault.port} flapping ({fault.times}x)"
        case IbPortDownFault() | IbErrorsFault() | IbDeviceGoneFault():
            return f"{fault.kind.replace('_', ' ')} (port {fault.port})"
        case _:
            return fault.kind.replace("_", " ")
