"""NVSwitch SXid lines, kept apart from GPU XIDs.

``nvidia-nvswitch3: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 44 ...`` reports an error of an
NVSwitch chip on the baseboard, not of a GPU: its PCI address is the switch's, so it must never become a
GPU :class:`~gpuhealth.core.snapshot.XidEvent`. This optional type lets a later check look at fabric errors.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from agent.backends.kernel_log.timestamps import absolute_time

_SXID = re.compile(
    r"(?:nvidia-nvswitch(?P<switch>\d+)\s*:\s*)?SXid\s*\((?:PCI:)?(?P<pci>[^()]*)\)\s*:?\s*(?P<sxid>\d{1,9})(?=,|\s|$)"
)


class SxidEvent(BaseModel):
    """One NVSwitch error line (an SXid), as the nvidia-nvswitch driver printed it."""

    model_config = ConfigDict(frozen=True, strict=True)

    sxid: int = Field(description="The SXid number, e.g. 12028.")
    switch: int | None = Field(default=None, description="N of the nvidia-nvswitchN device, when printed.")
    pci_bus_id: str | None = Field(default=None, description="The switch's PCI address as printed.")
    message: str | None = Field(default=None, description="The text after the SXid number.")
    at: datetime | None = Field(default=None, description="When it happened (UTC), if the line says.")


def parse_sxid_line(line: str, *, year_hint: int | None = None) -> SxidEvent | None:
    """The NVSwitch SXid a kernel-log line reports, or None for any other line (never raises)."""
    match = _SXID.search(line)
    if match is None:
        return None
    message = line[match.end() :].lstrip().removeprefix(",").strip()
    return SxidEvent(
        sxid=int(match["sxid"]),
        switch=int(match["switch"]) if match["switch"] is not None else None,
        pci_bus_id=match["pci"].strip() or None,
        message=message or None,
        at=absolute_time(line[: match.start()], year_hint=year_hint),
    )
