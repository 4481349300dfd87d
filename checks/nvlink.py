"""NVLink: links that report inactive, and per-link error counters.

Only a GPU whose ``nvlink`` is a list has NVLink; PCIe boards report ``null`` (NVML answers NOT_SUPPORTED)
and must never be told their links are down. Some PCIe-style boards answer differently: ``nvidia-smi nvlink
-s`` on an L4 or an unbridged PCIe A100 lists every link as ``<inactive>`` (NVML: feature disabled), so a
backend faithfully reports ``active: false``. On those boards NVLink comes only from optional bridges and an
inactive link is their normal state, so NVLINK_DOWN is not raised for GPUs whose name matches
``nvlink.bridge_optional_patterns`` (PCIe, NVL, L4, A40, ...). SXM / HGX boards, and GPUs of unknown name,
still get it: there an inactive link is a fault. Counters are cumulative, so thresholds are counts per link
(DCGM's own limits are rates: any replay / recovery error, 100 CRC errors per second).
"""

from __future__ import annotations

import re

from checks.base import gpu_finding, warn_or_fail
from checks.config import ChecksConfig, NvlinkConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot, NvLinkState

CHECK = "nvlink"


def check_nvlink(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``NVLINK_DOWN`` (fail, reset_gpu by default) and ``NVLINK_ERRORS`` (warn), one of each per GPU."""
    if not config.nvlink.enabled:
        return []
    findings: list[Finding] = []
    for gpu in snapshot.gpus:
        if gpu.nvlink is None:
            continue
        down = _down(gpu, gpu.nvlink, config.nvlink)
        if down is not None:
            findings.append(down)
        errors = _errors(gpu, gpu.nvlink, config.nvlink)
        if errors is not None:
            findings.append(errors)
    return findings


def _down(gpu: GpuSnapshot, links: list[NvLinkState], settings: NvlinkConfig) -> Finding | None:
    inactive = [link.link for link in links if link.active is False]
    if not inactive or bridges_optional(gpu.name, settings):
        return None
    action = settings.down_action
    listed = ", ".join(str(number) for number in inactive)
    detail = f"NVLink link(s) {listed} inactive ({len(inactive)} of {len(links)})"
    return gpu_finding(
        CHECK, gpu, status=warn_or_fail(action), code="NVLINK_DOWN", detail=detail, action=action
    )


def bridges_optional(name: str | None, settings: NvlinkConfig) -> bool:
    """Whether the GPU name marks a PCIe-style board whose NVLink links need optional bridges."""
    if not name:
        return False
    return any(
        re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", name, re.IGNORECASE)
        for word in settings.bridge_optional_patterns
    )


def _errors(gpu: GpuSnapshot, links: list[NvLinkState], settings: NvlinkConfig) -> Finding | None:
    noisy = [text for link in links if (text := _link_errors(link, settings))]
    if not noisy:
        return None
    detail = "NVLink errors over threshold: " + "; ".join(noisy)
    return gpu_finding(
        CHECK, gpu, status=Status.WARN, code="NVLINK_ERRORS", detail=detail, action=Action.NONE
    )


def _link_errors(link: NvLinkState, settings: NvlinkConfig) -> str:
    counters = (
        ("replay", link.replay_errors, settings.replay_warn_threshold),
        ("recovery", link.recovery_errors, settings.recovery_warn_threshold),
        ("CRC", link.crc_errors, settings.crc_warn_threshold),
    )
    over = [f"{name} {value}" for name, value, limit in counters if value is not None and value >= limit]
    return f"link {link.link}: {', '.join(over)}" if over else ""
