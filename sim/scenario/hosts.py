"""A large fleet's agents in child processes ("agent hosts"), a share of the nodes each.

One interpreter cannot run a thousand agents next to the emulated API server, the aggregator and the
engine: they all wait for one interpreter lock, and a burst of XIDs then waits behind the heartbeats. In a
real fleet every agent is a process of its own; here each host runs its share of the nodes the way
``start_agents`` runs a pooled fleet (the real agent from ``build_agent``, a fake NVML per node, the
ticker), and takes the engine's fault injections over a pipe. Nodes are dealt out in turn, so that a burst
on neighbouring nodes lands on every host.

A host learns how to reach the orchestrator from an :class:`AgentConnector` (a plain, picklable value: the
API server's URL and token, the Nomad clients' addresses), never from the emulator object itself, so the
same hosts serve an emulated API server and a real one.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

import structlog

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from sim.fakes.infiniband import FakeInfiniband
from sim.scenario.agents import PooledFleetNvml, RunningFleet, SimNode, scaled_knobs, wait_ready
from sim.scenario.faults import FabricFaultError, apply_fault
from sim.scenario.model import Fleet, GpuFault
from sim.scenario.ticker import AgentTicker

log = structlog.get_logger(__name__)

STOP_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 60.0
# Each host is one interpreter, every agent in it two or three threads (its loop's pass, its XID watcher,
# its node watch). 500 agents a host keep a burst's woken passes schedulable; 2,500 did not (the 5,000-node
# run: one host had 5,791 of its 5,835 threads runnable and stopped answering its pipe).
NODES_PER_HOST = 500


class AgentConnector(Protocol):
    """How an agent in a host process reaches its node's orchestrator; must pickle."""

    def agent_builder(self) -> Callable[[AgentSettings, NvmlLibrary], Agent]:
        """A function building one node's agent, made once per host process (shared clients live in it)."""
        ...


@dataclass(frozen=True)
class HostedNode:
    """One node of a host: its name, its seed in the fleet (the fake GPUs' serials), its settings."""

    name: str
    seed: int
    settings: AgentSettings


@dataclass(frozen=True)
class HostSpec:
    """Everything a host process needs, sent to it once at start."""

    fleet: Fleet
    nodes: tuple[HostedNode, ...]
    connector: AgentConnector
    ready_timeout_s: float


class HostError(RuntimeError):
    """A host process failed to start its agents, or stopped answering."""


def host_count(nodes: int) -> int:
    """How many host processes for ``nodes`` agents: one per ``NODES_PER_HOST`` (started), however few the
    cores: more agents in one interpreter only queue them behind its lock and its thousands of threads."""
    return max(1, -(-nodes // NODES_PER_HOST))


class HostedFleet:
    """The parent side: the host processes, their pipes, and which host runs which node."""

    def __init__(self, hosts: list[tuple[BaseProcess, Connection]], where: dict[str, int]) -> None:
        self._hosts = hosts
        self._where = where

    @classmethod
    def start(
        cls,
        fleet: Fleet,
        nodes: Sequence[HostedNode],
        connector: AgentConnector,
        *,
        ready_timeout_s: float,
        progress: Callable[[str, int, int], None],
    ) -> HostedFleet:
        """Start the hosts and wait until every agent is ready; ``progress(what, done, total)`` as they go.

        Raises HostError (naming the host's own error) when a host fails to start or is not ready in time.
        """
        count = host_count(len(nodes))
        shares: list[list[HostedNode]] = [[] for _ in range(count)]
        where: dict[str, int] = {}
        for position, node in enumerate(nodes):
            shares[position % count].append(node)
            where[node.name] = position % count
        context = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
        hosts: list[tuple[BaseProcess, Connection]] = []
        for index, share in enumerate(shares):
            parent_end, child_end = context.Pipe()
            spec = HostSpec(fleet, tuple(share), connector, ready_timeout_s)
            process = context.Process(
                target=host_main, args=(child_end, spec), name=f"gpuhealth-agent-host-{index}", daemon=True
            )
            process.start()
            child_end.close()
            hosts.append((process, parent_end))
        running = cls(hosts, where)
        try:
            running._wait_up(len(nodes), ready_timeout_s, progress)
        except BaseException:
            running.stop()
            raise
        return running

    def _wait_up(self, total: int, timeout_s: float, progress: Callable[[str, int, int], None]) -> None:
        done = {"started": [0] * len(self._hosts), "ready": [0] * len(self._hosts)}
        up = [False] * len(self._hosts)
        deadline = time.monotonic() + timeout_s * 2  # start-up, then readiness
        while not all(up):
            for index, (process, pipe) in enumerate(self._hosts):
                if up[index] or not pipe.poll(0.05):
                    if not process.is_alive() and not up[index]:
                        raise HostError(f"agent host {index} exited with {process.exitcode} while starting")
                    continue
                message = _receive(pipe, index)
                if message[0] == "up":
                    up[index] = True
                elif message[0] == "error":
                    raise HostError(f"agent host {index}: {message[1]}")
                else:
                    what, count = message[0], int(message[1])
                    done[what][index] = count
                    progress(what, sum(done[what]), total)
            if time.monotonic() > deadline:
                raise HostError(f"the agent hosts were not ready after {timeout_s * 2:.0f} s")

    def host_of(self, name: str) -> int:
        """The index of the host process that runs ``name``'s agent."""
        return self._where[name]

    def apply_fault(self, names: Sequence[str], gpu: int, fault: GpuFault) -> None:
        """Inject ``fault`` on GPU ``gpu`` of every node in ``names``: one message per host, then the replies.

        Raises FabricFaultError when a node cannot take the fault (as the in-process fleet does)."""
        per_host: dict[int, list[str]] = {}
        for name in names:
            per_host.setdefault(self._where[name], []).append(name)
        for index, share in per_host.items():
            self._hosts[index][1].send(("fault", share, gpu, fault))
        for index in per_host:
            message = _receive(self._hosts[index][1], index, REPLY_TIMEOUT_S)
            if message[0] == "fabric_error":
                raise FabricFaultError(str(message[1]))
            if message[0] != "ok":
                raise HostError(f"agent host {index}: {message[1]}")

    def stop(self) -> None:
        """Stop every agent (each host stops its own, as the in-process fleet does), then the hosts."""
        for process, pipe in self._hosts:
            if process.is_alive():
                try:
                    pipe.send(("stop",))
                except (BrokenPipeError, OSError):
                    continue
        # One deadline for all: the hosts stop together, so waiting STOP_TIMEOUT_S for each in turn would let
        # a starved fleet of ten hosts take ten times as long to stop (it did, at 5,000 agents).
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process, _pipe in self._hosts:
            process.join(max(0.0, deadline - time.monotonic()))
        # The stragglers are killed together, then reaped: a killed host's ~1,000 threads take a while to
        # exit on a starved machine (a minute each at 10,000 agents), and the others must not run meanwhile.
        stuck = [(index, process) for index, (process, _pipe) in enumerate(self._hosts) if process.is_alive()]
        for index, process in stuck:
            log.warning("agent_host_killed", host=index)
            process.kill()
        for _index, process in stuck:
            process.join()
        for _process, pipe in self._hosts:
            pipe.close()


def _receive(pipe: Connection, index: int, timeout_s: float | None = None) -> tuple[Any, ...]:
    if timeout_s is not None and not pipe.poll(timeout_s):
        raise HostError(f"agent host {index} did not answer within {timeout_s:.0f} s")
    try:
        message: tuple[Any, ...] = pipe.recv()
    except EOFError:
        raise HostError(f"agent host {index} is gone") from None
    return message


# --- the child side --------------------------------------------------------------------------------------


def host_main(pipe: Connection, spec: HostSpec) -> None:
    """A host process: start its agents, report progress, then apply faults until told to stop."""
    from core.logging import configure_logging

    configure_logging("error", "json")
    try:
        running = _start(pipe, spec)
    except Exception as exc:  # noqa: BLE001 - the process boundary: the parent gets it as one line
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    pipe.send(("up",))
    nodes = {node.name: node for node in running.nodes}
    try:
        while True:
            message = pipe.recv()
            if message[0] == "stop":
                break
            _, names, gpu, fault = message
            pipe.send(_apply(nodes, names, gpu, fault))
    except EOFError:  # the parent is gone: stop all the same
        pass
    finally:
        running.stop()


def _apply(nodes: dict[str, SimNode], names: list[str], gpu: int, fault: GpuFault) -> tuple[str, str]:
    try:
        for name in names:
            node = nodes[name]
            apply_fault(node.nvml, node.infiniband, gpu, fault)
    except FabricFaultError as exc:
        return ("fabric_error", str(exc))
    except Exception as exc:  # noqa: BLE001 - the process boundary: the parent gets it as one line
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("ok", "")


def _start(pipe: Connection, spec: HostSpec) -> RunningFleet:
    build = spec.connector.agent_builder()
    fleet = spec.fleet
    nodes: list[SimNode] = []
    for done, hosted in enumerate(spec.nodes, start=1):
        nvml = PooledFleetNvml(
            fleet.gpu_profile, fleet.gpus_per_node, seed=hosted.seed, node_name=hosted.name
        )
        sysfs = hosted.settings.fabric.sysfs_root
        infiniband = FakeInfiniband(sysfs, fleet.ib_ports) if fleet.ib_ports else None
        nodes.append(SimNode(hosted.name, nvml, build(hosted.settings, nvml), infiniband))
        pipe.send(("started", done))
    ticker = AgentTicker([node.agent for node in nodes], scaled_knobs(fleet).interval_s).start()
    running = RunningFleet(nodes, ticker)
    try:
        wait_ready(nodes, spec.ready_timeout_s, lambda done, _total: pipe.send(("ready", done)))
    except BaseException:
        running.stop()
        raise
    return running
