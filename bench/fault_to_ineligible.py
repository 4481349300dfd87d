"""Fault-to-ineligible latency on Nomad: an XID injected in the fake NVML -> the node ineligible, seen by
another client.

``python -m bench.fault_to_ineligible [--quick] [--nodes N] [--injections K] --json`` runs a fleet of agents
in one process (the real loop on its default 10 s interval, the Nomad executor talking to each node's local
client agent) against the emulated Nomad (``sim/nomad``), and a separate client that follows the node list
with blocking queries, as a scheduler would. Each injection picks a node, injects XID 79 on one GPU and
times until that client sees the node ``ineligible``; then the fault clears (the agent is woken for a clean
reading, the incident closes, the node is eligible again) before the next one. What is measured: NVML
event thread -> loop wake-up -> snapshot -> checks -> state machine -> plan -> metadata and eligibility
writes -> Nomad -> a blocking query answering another client.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from agent.loop import Agent
from agent.settings import AgentSettings, HttpSettings
from agent.state.machine import DebounceConfig
from agent.wiring import build_agent
from bench.fault_latency import latency_summary, run_cli, wait_until_watching
from sim.fakes.nvml import FakeNvml
from sim.nomad.harness import NomadSim
from sim.nomad.model import node_names

WAIT_S = 15.0
ANCHOR = "Nomad's NVIDIA device plugin does no health checking at all (docs/benchmarks.md, Reference figures)"


class EligibilityWatcher:
    """Another client's blocking queries on ``/v1/nodes``: when was each node seen (in)eligible."""

    def __init__(self, address: str) -> None:
        self._url = f"{address}/v1/nodes"
        self._session = requests.Session()
        self._eligible: dict[str, bool] = {}
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-eligibility-watch", daemon=True)

    def start(self) -> EligibilityWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._session.close()

    def _run(self) -> None:
        index = 0
        while not self._stopping.is_set():
            try:
                response = self._session.get(self._url, params={"index": index, "wait": "5s"}, timeout=10)
            except requests.RequestException:
                if self._stopping.is_set():
                    return
                raise
            index = int(response.headers.get("X-Nomad-Index", index))
            with self._changed:
                for node in response.json():
                    self._eligible[node["Name"]] = node["SchedulingEligibility"] == "eligible"
                self._changed.notify_all()

    def wait_for(self, name: str, eligible: bool, timeout: float = WAIT_S) -> float:
        """The perf_counter time at which ``name`` was seen ``eligible`` (or not)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._eligible.get(name) is eligible, timeout):
                raise TimeoutError(f"{name}: never seen {'eligible' if eligible else 'ineligible'}")
            return time.perf_counter()


@contextlib.contextmanager
def nomad_fleet(sim: NomadSim, names: list[str]) -> Iterator[list[tuple[str, FakeNvml, Agent]]]:
    """A started agent per node, each finding its node through the node's local client agent."""
    fleet: list[tuple[str, FakeNvml, Agent]] = []
    with tempfile.TemporaryDirectory(prefix="gpuhealth-bench-") as state_root:
        try:
            for index, name in enumerate(names):
                nvml = FakeNvml("h100_sxm", 8, seed=index, node_name=name)
                settings = AgentSettings(
                    orchestrator="nomad",
                    nomad={"address": sim.client_address(name)},
                    state_dir=Path(state_root) / name,
                    http=HttpSettings(enabled=False),
                    debounce=DebounceConfig(min_dwell_s=0, clean_readings_to_recover=1),
                )
                fleet.append((name, nvml, build_agent(settings, library=nvml).start()))
            yield fleet
        finally:
            for _, _, agent in fleet:
                agent.stop()


def inject_once(name: str, nvml: FakeNvml, agent: Agent, watcher: EligibilityWatcher, gpu: int) -> float:
    """One XID 79; seconds until the node is seen ineligible; then the fault clears and it is eligible."""
    started = time.perf_counter()
    if not nvml.inject_xid(gpu, 79):
        raise RuntimeError(f"{name}: the fake GPU refused the XID")
    seen = watcher.wait_for(name, eligible=False)
    agent.wake.set()  # a clean reading now: the incident closes (dwell 0) and eligibility comes back
    watcher.wait_for(name, eligible=True)
    return seen - started


def run(nodes: int, injections: int) -> dict[str, Any]:
    """Start the fleet, wait until every agent is watching, inject, and summarise the latencies."""
    with NomadSim(nodes=nodes, controllers=False) as sim:
        watcher = EligibilityWatcher(sim.address).start()
        with nomad_fleet(sim, node_names(nodes)) as fleet:
            wait_until_watching(agent for _, _, agent in fleet)
            writes_before = sum(sim.mutating_requests.values())
            latencies = [
                inject_once(*fleet[i % len(fleet)], watcher, gpu=(i // len(fleet)) % 8)
                for i in range(injections)
            ]
            writes = sum(sim.mutating_requests.values()) - writes_before
        watcher.stop()
    return latency_summary(
        "fault_to_ineligible",
        nodes,
        latencies,
        ANCHOR,
        nomad_writes_per_injection=round(writes / injections, 2),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    return run_cli("python -m bench.fault_to_ineligible", __doc__.splitlines()[0], run, argv)


if __name__ == "__main__":
    sys.exit(main())
