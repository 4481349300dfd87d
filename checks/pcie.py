"""PCIe link: width and generation against their maximum, and the replay counter.

The current generation drops at idle to save power, so a lower generation alone is normal and raises
nothing unless ``pcie.warn_on_gen_below_max`` asks for it; a narrower link is a real degradation (lost lanes:
half the host bandwidth at x8) but the GPU still computes correctly, so it warns with ``none`` by default and
``pcie.width_degraded_action`` can make it take the node out. The replay counter is cumulative since the
driver loaded; DCGM's limit is a rate (8 per minute), which a snapshot cannot see, hence a count threshold.
"""

from __future__ import annotations

from checks.base import gpu_finding, warn_or_fail
from checks.config import ChecksConfig, PcieConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

CHECK = "pcie"


def check_pcie(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``PCIE_LINK_DEGRADED`` (narrower link; opt-in: lower generation) and ``PCIE_REPLAYS`` (warn)."""
    if not config.pcie.enabled:
        return []
    findings: list[Finding] = []
    for gpu in snapshot.gpus:
        degraded = _link_degraded(gpu, config.pcie)
        if degraded is not None:
            findings.append(degraded)
        replays = _replays(gpu, config.pcie)
        if replays is not None:
            findings.append(replays)
    return findings


def _link_degraded(gpu: GpuSnapshot, settings: PcieConfig) -> Finding | None:
    link = gpu.pcie
    if link is None:
        return None
    narrow = link.width is not None and link.max_width is not None and link.width < link.max_width
    slow = link.gen is not None and link.max_gen is not None and link.gen < link.max_gen
    if narrow:
        action = settings.width_degraded_action
        detail = f"PCIe link runs at x{link.width} of x{link.max_width}"
        if slow:
            detail += f", gen {link.gen} of {link.max_gen}"
        return gpu_finding(
            CHECK, gpu, status=warn_or_fail(action), code="PCIE_LINK_DEGRADED", detail=detail, action=action
        )
    if slow and settings.warn_on_gen_below_max:
        detail = f"PCIe link runs at gen {link.gen} of {link.max_gen}"
        return gpu_finding(
            CHECK, gpu, status=Status.WARN, code="PCIE_LINK_DEGRADED", detail=detail, action=Action.NONE
        )
    return None


def _replays(gpu: GpuSnapshot, settings: PcieConfig) -> Finding | None:
    count = gpu.pcie.replay_counter if gpu.pcie is not None else None
    if count is None or count < settings.replay_warn_threshold:
        return None
    detail = f"{count} PCIe replays since the driver loaded (>= {settings.replay_warn_threshold})"
    return gpu_finding(CHECK, gpu, status=Status.WARN, code="PCIE_REPLAYS", detail=detail, action=Action.NONE)
