"""One rig for tests that run real agents on fake GPUs against an emulated orchestrator and a live aggregator.

``FleetRig`` starts an agent on a node the first time a test touches it (``build_agent``: fake NVML, the
orchestrator's executor, the aggregator link) and drives its loop one pass at a time: ``tick()`` delivers
the pass's report to the aggregator, ``xid()`` injects an XID through NVML's event thread and waits until it
woke the loop, ``break_node()`` is the XID and the pass that handles it, ``finish_drain()`` waits for the
node's drain. What differs between tests is only how a node's settings and connection are made: the test
passes ``settings(node, state_dir)`` and ``connect(node)`` (extra ``build_agent`` keywords: the emulated
API server's client on Kubernetes, nothing on Nomad, where the agent finds its node through its address).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from live_aggregator import LiveAggregator
from waiting import HANG_GUARD_S

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.wiring import build_agent
from core.clock import RealClock
from sim.fakes.nvml import FakeNvml

SettingsFor = Callable[[str, Path], AgentSettings]
ConnectFor = Callable[[str], dict[str, Any]]
ActionRow = tuple[str, str, str]


def agent_settings(
    node: str, state_dir: Path, live: LiveAggregator, *, link: dict[str, Any] | None = None, **fields: Any
) -> AgentSettings:
    """An agent's settings for a test: the node, its state directory, the link to ``live`` (fast permit
    retries; ``link`` adds or replaces its settings), no HTTP endpoint; ``fields`` add or replace any other
    setting."""
    uplink = {"url": live.url, "permit_retry_s": 0.3, "timeout_s": 2} | (link or {})
    base: dict[str, Any] = {"state_dir": state_dir, "aggregator": uplink, "http": HttpSettings(enabled=False)}
    if "orchestrator" not in fields or fields["orchestrator"] == "kubernetes":
        base["node_name"] = node  # on Nomad the agent learns its node's name from the client agent
    return AgentSettings(**(base | fields))


def incident_actions(aggregator: LiveAggregator, incident_id: str) -> list[ActionRow]:
    """(action, result, message) of one incident's timeline on the aggregator."""
    with aggregator.client() as oncall:
        events = oncall.incident(incident_id).timeline
    return [
        (str(e.details.get("action")), str(e.details.get("result")), e.message)
        for e in events
        if e.kind == "action"
    ]


class FleetRig:
    """The agents started on a fleet's nodes, each on its own fake NVML, reporting to one aggregator."""

    def __init__(
        self,
        aggregator: LiveAggregator,
        state_root: Path,
        *,
        settings: SettingsFor,
        connect: ConnectFor = lambda _node: {},
        gpu_profile: str = "h100_sxm",
    ) -> None:
        self.aggregator = aggregator
        self.state_root = state_root
        self.settings = settings
        self.connect = connect
        self.gpu_profile = gpu_profile
        self.agents: dict[str, Agent] = {}
        self.nvml: dict[str, FakeNvml] = {}

    def agent(self, node: str) -> Agent:
        """The agent of ``node``, started on first use and reported once (the aggregator then knows it)."""
        if node not in self.agents:
            self.nvml.setdefault(node, FakeNvml(self.gpu_profile, 8, seed=7, node_name=node))
            agent = build_agent(
                self.settings(node, self.state_root / node),
                library=self.nvml[node],
                clock=RealClock(),
                **self.connect(node),
            )
            assert agent.node == node, f"the agent took its node to be {agent.node!r}, not {node!r}"
            self.agents[node] = agent
            self.tick(node)
        return self.agents[node]

    def start(self, *nodes: str) -> None:
        """Start the agents of ``nodes`` now (each reports once)."""
        for node in nodes:
            self.agent(node)

    def restart(self, node: str) -> Agent:
        """The node's agent process ends and a new one starts with the same state directory and GPUs."""
        self.agents.pop(node).close()
        return self.agent(node)

    def tick(self, node: str) -> TickResult:
        """One pass of the node's loop, its report delivered to the aggregator."""
        agent = self.agents[node]
        result = agent.tick()
        assert agent.parts.link is not None
        agent.parts.link.deliver()
        return result

    def xid(self, node: str, xid: int = 79, gpu: int = 0) -> None:
        """An XID on ``gpu``, delivered by NVML's event thread; returns once it woke the node's loop."""
        agent = self.agent(node)
        feed = agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        agent.wake.clear()
        assert self.nvml[node].inject_xid(gpu, xid)
        assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"

    def break_node(self, node: str, xid: int = 79) -> TickResult:
        """The XID on GPU 0 and the pass that handles it (permit asked, drain started if granted)."""
        self.xid(node, xid)
        return self.tick(node)

    def finish_drain(self, node: str) -> TickResult:
        """Wait for the node's drain (and requeue) to end, then the pass that reports it."""
        assert self.agents[node].parts.executor.wait_for_drain(HANG_GUARD_S), "the drain did not end"
        return self.tick(node)

    def timeline(self, node: str) -> list[ActionRow]:
        """(action, result, message) of the node's open incident's timeline on the aggregator."""
        with self.aggregator.client() as oncall:
            incident = oncall.node(node).incident
        assert incident is not None, f"{node} has no open incident"
        return incident_actions(self.aggregator, incident.id)

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        self.agents.clear()
