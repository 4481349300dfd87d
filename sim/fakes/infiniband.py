"""A fake ``/sys/class/infiniband`` tree on disk, with the faults the fabric checks look for.

It writes the files the kernel writes, with the kernel's spelling (drivers/infiniband/core/sysfs.c;
tests/fixtures/fabric/README.md cites the sources), so :func:`agent.backends.infiniband.read_ib_ports`
reads it exactly as it reads a real node. Faults: a port down (``state`` ``1: DOWN``, ``phys_state``
``3: Disabled`` or ``2: Polling``), a flap (down and up again, ``link_downed`` + 1), a burst of an error
counter, a device that vanishes (its directory removed) and comes back.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Final

from agent.backends.infiniband import PORT_COUNTERS

ACTIVE: Final = "4: ACTIVE"
DOWN: Final = "1: DOWN"
LINK_UP: Final = "5: LinkUp"
POLLING: Final = "2: Polling"
DISABLED: Final = "3: Disabled"
NDR_RATE: Final = "400 Gb/sec (4X NDR)"

HW_COUNTERS: Final[tuple[str, ...]] = (
    "rnr_nak_retry_err",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
)
"""A few of mlx5's hw_counters, enough for the reader and the checks to see them."""


class FakeInfiniband:
    """``devices`` RDMA devices of one port each (mlx5_0 ...), all up; mutate with the fault methods."""

    def __init__(self, root: Path, devices: int = 8, *, link_layer: str = "InfiniBand") -> None:
        self.root = root
        self._lock = threading.Lock()
        self._link_layer = link_layer
        self._gone: set[str] = set()
        self.devices = [f"mlx5_{number}" for number in range(devices)]
        root.mkdir(parents=True, exist_ok=True)
        for device in self.devices:
            self._create(device)

    def _port_dir(self, device: str, port: int = 1) -> Path:
        return self.root / device / "ports" / str(port)

    def _create(self, device: str) -> None:
        port = self._port_dir(device)
        (port / "counters").mkdir(parents=True, exist_ok=True)
        (port / "hw_counters").mkdir(parents=True, exist_ok=True)
        self._write(port / "state", ACTIVE)
        self._write(port / "phys_state", LINK_UP)
        self._write(port / "rate", NDR_RATE)
        self._write(port / "link_layer", self._link_layer)
        for name in PORT_COUNTERS:
            self._write(port / "counters" / name, "0")
        for name in HW_COUNTERS:
            self._write(port / "hw_counters" / name, "0")

    @staticmethod
    def _write(path: Path, text: str) -> None:
        path.write_text(text + "\n", encoding="ascii")

    def _read_counter(self, device: str, name: str, port: int = 1) -> int:
        return int((self._port_dir(device, port) / "counters" / name).read_text().strip())

    def port_down(self, device: str, *, phys_state: str = DISABLED) -> None:
        """The port's link is down: logical ``1: DOWN``, physical ``3: Disabled`` (or ``2: Polling``)."""
        with self._lock:
            port = self._port_dir(device)
            self._write(port / "state", DOWN)
            self._write(port / "phys_state", phys_state)
            self._bump(device, "link_downed", 1)

    def port_up(self, device: str) -> None:
        """The port is back: ``4: ACTIVE`` / ``5: LinkUp``."""
        with self._lock:
            port = self._port_dir(device)
            self._write(port / "state", ACTIVE)
            self._write(port / "phys_state", LINK_UP)

    def flap(self, device: str, times: int = 1) -> None:
        """The link went down and up ``times`` times between two readings (``link_downed`` += times)."""
        with self._lock:
            self._bump(device, "link_downed", times)
            self._bump(device, "link_error_recovery", times)

    def add_errors(self, device: str, counter: str, count: int) -> None:
        """A burst of ``count`` on one standard counter (``symbol_error``, ``port_rcv_errors`` ...)."""
        with self._lock:
            self._bump(device, counter, count)

    def reset_counters(self, device: str) -> None:
        """Every counter back to 0, as after a driver reload or a reboot."""
        with self._lock:
            for name in PORT_COUNTERS:
                self._write(self._port_dir(device) / "counters" / name, "0")

    def remove_device(self, device: str) -> None:
        """The device vanishes from the tree (HCA fell off the bus, driver unbound)."""
        with self._lock:
            shutil.rmtree(self.root / device, ignore_errors=True)
            self._gone.add(device)

    def restore_device(self, device: str) -> None:
        """A vanished device is back, healthy, its counters from 0."""
        with self._lock:
            self._create(device)
            self._gone.discard(device)

    def heal(self) -> None:
        """Every device present and every port up (counters keep their totals)."""
        for device in sorted(self._gone):
            self.restore_device(device)
        for device in self.devices:
            self.port_up(device)

    def _bump(self, device: str, counter: str, count: int) -> None:
        path = self._port_dir(device) / "counters" / counter
        self._write(path, str(self._read_counter(device, counter) + count))
