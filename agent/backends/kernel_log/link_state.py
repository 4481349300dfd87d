"""NIC link state lines: ``mlx5_core 0000:3b:00.0 enp59s0f0np0: Link down`` / ``... Link up``.

mlx5's Ethernet side prints these through ``netdev_info`` when the carrier changes (mlx5e_update_carrier in
drivers/net/ethernet/mellanox/mlx5/core/en_main.c), so the prefix is the driver, the PCI function and the
interface. They are the kernel-log half of link-flap detection (the other half is the port's
``link_downed`` counter); the fabric checks count the downs per port in a window.
"""

from __future__ import annotations

import re

from agent.backends.kernel_log.text_lines import logged_by_a_program
from agent.backends.kernel_log.timestamps import absolute_time
from core.snapshot import LinkEvent

_LINK = re.compile(
    r"\bmlx5_core\s+(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<netdev>[^\s:]+):\s+"
    r"Link (?P<state>up|down)\b",
    re.IGNORECASE,
)


def parse_link_line(line: str, *, year_hint: int | None = None) -> LinkEvent | None:
    """The link change an mlx5 kernel-log line reports, or None for any other line (never raises); a line
    another program logged (quoting the kernel's) is None, as for XIDs."""
    match = _LINK.search(line)
    if match is None or logged_by_a_program(line[: match.start()]):
        return None
    return LinkEvent(
        up=match["state"].lower() == "up",
        pci_bus_id=match["pci"],
        netdev=match["netdev"],
        message=line[match.start() :].strip(),
        at=absolute_time(line[: match.start()], year_hint=year_hint),
    )
