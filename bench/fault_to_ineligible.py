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

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from agent.backends.fake_nvml import FakeNvml
from agent.logging import configure_logging
from agent.loop import Agent
from agent.settings import AgentSettings, HttpSettings
from agent.state_machine import DebounceConfig
from agent.wiring import build_agent
from bench.agent_fleet import percentile
from sim.nomad.harness import NomadSim
from sim.nomad.model import node_names

FULL_NODES, QUICK_NODES = 50, 10
FULL_INJECTIONS, QUICK_INJECTIONS = 200, 30
TARGET_P99_S = 1.0
WAIT_S = 15.0
ANCHOR = "Nomad's NVIDIA device plugin does no health checking at all (REFERENCE.md)"


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
            _wait_ready([agent for _, _, agent in fleet])
            writes_before = sum(sim.mutating_requests.values())
            latencies = [
                inject_once(*fleet[i % len(fleet)], watcher, gpu=(i // len(fleet)) % 8)
                for i in range(injections)
            ]
            writes = sum(sim.mutating_requests.values()) - writes_before
        watcher.stop()
    p99 = percentile(latencies, 0.99)
    return {
        "benchmark": "fault_to_ineligible",
        "agents": nodes,
        "injections": injections,
        "p50_s": round(statistics.median(latencies), 4),
        "p99_s": round(p99, 4),
        "max_s": round(max(latencies), 4),
        "mean_s": round(statistics.fmean(latencies), 4),
        "nomad_writes_per_injection": round(writes / injections, 2),
        "interval_s": 10.0,
        "target_p99_s": TARGET_P99_S,
        "meets_target": p99 <= TARGET_P99_S,
        "anchor": ANCHOR,
    }


def _wait_ready(agents: list[Agent], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for agent in agents:
        feed = agent.parts.feed
        while not (agent.ready and feed is not None and feed.watching):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{agent.node}: the agent never became ready")
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse flags, run, print one JSON object (or a short text summary)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.fault_to_ineligible", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_NODES} agents, {QUICK_INJECTIONS} injections"
    )
    parser.add_argument("--nodes", type=int, help=f"agents in the fleet (default {FULL_NODES})")
    parser.add_argument("--injections", type=int, help=f"XIDs injected (default {FULL_INJECTIONS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    configure_logging("error", "json")
    nodes = args.nodes or (QUICK_NODES if args.quick else FULL_NODES)
    injections = args.injections or (QUICK_INJECTIONS if args.quick else FULL_INJECTIONS)
    result = run(nodes, injections)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{injections} XIDs on {nodes} agents: p50 {result['p50_s']} s, p99 {result['p99_s']} s, "
            f"max {result['max_s']} s (target p99 <= {TARGET_P99_S} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
