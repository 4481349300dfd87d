"""A fleet of fake GPU nodes under a training load, read through the real NVML backend.

``LoadedFleet`` is what the peer comparison's scenario and benchmark run: ``nodes`` fake nodes of one GPU
model, each step a synchronous job keeps most of them busy (a share sits idle between jobs), every GPU with
the healthy noise of ``sim/fakes/load.py``; ``readings()`` reads each node with ``NvmlBackend`` and turns
every GPU into the ``GpuSummary`` an agent reports (``agent.uplink.link.gpu_readings``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from agent.backends.nvml.backend import NvmlBackend
from agent.uplink.link import gpu_readings
from core.aggregator_api import GpuSummary
from sim.fakes.nvml import FakeNvml


class LoadedFleet:
    """``nodes`` fake nodes named ``<prefix>-NNNN``; ``step(i)`` runs one step of the fleet's day."""

    def __init__(
        self,
        nodes: int,
        *,
        profile: str = "h100_sxm",
        seed: int | str = 0,
        prefix: str = "gpu",
        idle_share: float = 0.15,
    ) -> None:
        self.seed, self.idle_share = seed, idle_share
        self.names = [f"{prefix}-{number:04d}" for number in range(nodes)]
        self.nvml = {name: FakeNvml(profile, seed=seed, node_name=name) for name in self.names}
        self._backends = {name: NvmlBackend(node_name=name, library=fake) for name, fake in self.nvml.items()}

    def _idle(self, name: str, step: int) -> bool:
        digest = hashlib.sha256(f"{self.seed}/{name}/{step}/idle".encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.idle_share

    def step(self, step: int) -> None:
        """Every node's job for one step: busy (at its own intensity) or idle between jobs."""
        for name, fake in self.nvml.items():
            fake.run_load(step, busy=not self._idle(name, step))

    def readings(self) -> Iterator[tuple[str, list[GpuSummary]]]:
        """Each node's GPUs as its agent reports them, read now through the NVML backend."""
        for name, backend in self._backends.items():
            snapshot = backend.snapshot()
            yield (
                name,
                [
                    GpuSummary(
                        uuid=gpu.uuid,
                        index=gpu.index,
                        name=gpu.name,
                        pci_bus_id=gpu.pci_bus_id,
                        serial=gpu.serial,
                        readings=gpu_readings(gpu, snapshot.driver_version),
                    )
                    for gpu in snapshot.gpus
                ],
            )

    def stored(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """The same as the aggregator stores it (the node row's ``gpus``)."""
        for name, gpus in self.readings():
            yield name, [gpu.model_dump(mode="json") for gpu in gpus]

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
