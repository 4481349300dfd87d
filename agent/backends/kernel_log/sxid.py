"""NVSwitch SXid lines, kept apart from GPU XIDs.

``nvidia-nvswitch3: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 44 ...`` reports an error of an
NVSwitch chip on the baseboard, not of a GPU: its PCI address is the switch's, so it must never become a
GPU :class:`~core.snapshot.XidEvent`. They go to the snapshot's ``fabric.sxid_events`` with their
severity (the driver prints ``Fatal`` or ``Non-fatal`` after the number), where checks/fabric.py judges them.
The driver's follow-up ``Severity N Engine instance ...`` line keeps its N (``detail_severity``), so an SXid
whose header line was lost (a rotated or truncated log) is still judged when N says fatal.
"""

from __future__ import annotations

import re

from agent.backends.kernel_log.text_lines import logged_by_a_program
from agent.backends.kernel_log.timestamps import absolute_time
from core.snapshot import SxidEvent, SxidSeverity

_SEVERITY = re.compile(r"^(?P<word>Non-fatal|Fatal)\b", re.IGNORECASE)
# The driver's follow-up line (nvswitch_dump_error_entry): "Severity %d Engine instance %02d Sub-engine ...",
# with NVSWITCH_ERROR_SEVERITY_NONFATAL 0 and NVSWITCH_ERROR_SEVERITY_FATAL 1.
_DETAIL_SEVERITY = re.compile(r"^Severity\s+(?P<level>\d{1,2})\b", re.IGNORECASE)

_SXID = re.compile(
    r"(?:nvidia-nvswitch(?P<switch>\d+)\s*:\s*)?SXid\s*\((?:PCI:)?(?P<pci>[^()]*)\)\s*:?\s*(?P<sxid>\d{1,9})(?=,|\s|$)"
)


def parse_sxid_line(line: str, *, year_hint: int | None = None) -> SxidEvent | None:
    """The NVSwitch SXid a kernel-log line reports, or None for any other line (never raises).

    A line that a program other than the kernel logged (a syslog header naming ``logger``'s tag, another
    monitor, a health script) quotes an SXid; it is not the driver reporting one, and is None, exactly as
    for XIDs (:func:`~agent.backends.kernel_log.text_lines.logged_by_a_program`).
    """
    match = _SXID.search(line)
    if match is None or logged_by_a_program(line[: match.start()]):
        return None
    message = line[match.end() :].lstrip().removeprefix(",").strip()
    detail = _DETAIL_SEVERITY.match(message)
    return SxidEvent(
        severity=_severity(message),
        detail_severity=int(detail["level"]) if detail is not None else None,
        sxid=int(match["sxid"]),
        switch=int(match["switch"]) if match["switch"] is not None else None,
        pci_bus_id=match["pci"].strip() or None,
        message=message or None,
        at=absolute_time(line[: match.start()], year_hint=year_hint),
    )


def _severity(message: str) -> SxidSeverity | None:
    found = _SEVERITY.match(message)
    if found is None:
        return None
    return "non-fatal" if found["word"].lower() == "non-fatal" else "fatal"
