"""Play a scenario on real time: the fleet, the aggregator, the alert receiver, the agents, the workloads,
then the timeline of faults, looking at every expectation until each is decided.

Nothing here names an orchestrator's objects: :mod:`sim.scenario.orchestrator` is the seam.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.settings import AgentSettings
from sim.aggregator_child import AggregatorChild
from sim.aggregator_process import AggregatorStartError
from sim.realkube.control_plane import ControlPlaneUnavailable
from sim.scenario.agents import (
    AgentFleet,
    agent_settings,
    scaled_knobs,
    start_agents,
    time_scale,
    wait_ready,
)
from sim.scenario.expectations import Look, World, expected_text, look_safely
from sim.scenario.faults import FabricFaultError, describe_fault
from sim.scenario.hosts import HostedFleet, HostedNode, HostError
from sim.scenario.identities import DemoIdentities
from sim.scenario.kube_orchestrator import KubernetesOrchestrator
from sim.scenario.model import (
    AggregatorOutageFault,
    ApiOutageFault,
    ClearFault,
    Expectation,
    Scenario,
)
from sim.scenario.nomad_orchestrator import NomadOrchestrator
from sim.scenario.orchestrator import JobView, NodeView, Orchestrator
from sim.scenario.real_orchestrator import RealKubeOrchestrator, check_real_playable
from sim.scenario.receiver import AlertReceiver
from sim.scenario.summary import (
    FLEET_PAGE_PREFIX,
    Cluster,
    Durations,
    ExpectationResult,
    FaultLatency,
    RunSummary,
    summarise_latencies,
)
from sim.scenario.targets import TargetError, TargetResolver, check_playable
from sim.scenario.timeline import Action, TaintProbe, expand

LOOK_EVERY_S = 0.25
# A dilated scenario is looked at proportionally less often, up to this: every look of the expectations
# reads the fleet and asks the aggregator, in the process that also runs a thousand agents.
SLOWEST_LOOK_EVERY_S = 1.0
REFRESH_EVERY_S = 0.5
GRACE_S = 5.0  # past the last deadline, in case a look came late on a busy machine
READY_TIMEOUT_S = 60.0
READY_S_PER_NODE = 0.6  # a large fleet's agents come up one after another (the emulator's watches slow down)
WORKLOAD_TIMEOUT_S = 60.0
# From this size on, the agents run in host processes (sim/scenario/hosts.py), as a pooled fleet each.
HOSTED_FROM = 65
STALE_AFTER_HEARTBEATS = 3.0  # missed heartbeats before a node is stale (a busy machine delays some)


class ScenarioRunError(RuntimeError):
    """The scenario could not be played (a target names no node, the fleet did not come up)."""


@dataclass
class LiveState:
    """What the live view shows, refreshed while the timeline plays."""

    at_s: float
    length_s: float
    nodes: list[NodeView]
    job: JobView | None
    results: dict[str, ExpectationResult | None]  # name -> decided result, None while pending
    alerts: int


class Observer(Protocol):
    """Who watches a run: progress while starting, timeline events, and the live state."""

    live: bool  # False: refresh() is never called (no fleet reads for a headless run)

    def progress(self, text: str) -> None: ...

    def event(self, at_s: float, text: str) -> None: ...

    def refresh(self, state: LiveState) -> None: ...


def orchestrator_for(scenario: Scenario, cluster: Cluster = "emulated") -> Orchestrator:
    """The orchestrator the scenario asks for: emulated, or (``cluster="real"``, Kubernetes only) the real
    stack of ``sim.realkube``; raises ScenarioRunError in one line when the real stack cannot play it."""
    if cluster == "real":
        try:
            check_real_playable(scenario)
        except ControlPlaneUnavailable as exc:
            raise ScenarioRunError(str(exc)) from None
        return RealKubeOrchestrator()
    if scenario.orchestrator == "kubernetes":
        return KubernetesOrchestrator()
    if scenario.orchestrator == "nomad":
        return NomadOrchestrator()
    raise ScenarioRunError(f"orchestrator {scenario.orchestrator} is not emulated")


@dataclass
class _Pending:
    expectation: Expectation
    looks: int = 0
    result: ExpectationResult | None = None
    last: Look | None = field(default=None)


def run_scenario(
    scenario: Scenario,
    observer: Observer,
    *,
    keep_s: float = 0.0,
    story_over: Callable[[RunSummary], None] | None = None,
    cluster: Cluster = "emulated",
) -> RunSummary:
    """Play ``scenario`` and report every expectation; raises ScenarioRunError when it cannot play.

    ``cluster="real"`` plays it on a real Kubernetes stack on this machine (``sim.realkube``: kube-apiserver,
    kube-scheduler, KWOK GPU nodes, the JobSet manager) instead of the emulator.

    A fleet too large to poll at the scenario's pace plays the scenario dilated by ``time_scale``. With
    ``keep_s``, the fleet and its aggregator's fleet page stay up that long after the story (Ctrl-C or
    SIGTERM ends it), and ``story_over`` is given the summary as the story ends, before that wait.
    """
    began = time.monotonic()
    try:
        check_playable(scenario)
    except TargetError as exc:
        raise ScenarioRunError(str(exc)) from None
    scale = time_scale(scenario.fleet)
    scenario = scenario.dilated(scale)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuhealth-demo-")))
        orchestrator = orchestrator_for(scenario, cluster)
        receiver = AlertReceiver().start()
        stack.callback(receiver.stop)
        stack.callback(orchestrator.stop)
        if cluster == "real":
            observer.progress(
                f"starting a real Kubernetes stack (kube-apiserver, kube-scheduler, KWOK) with "
                f"{scenario.fleet.nodes} GPU nodes"
            )
        else:
            observer.progress(f"starting {scenario.orchestrator} with {scenario.fleet.nodes} GPU nodes")
        try:
            names = orchestrator.start(scenario.fleet.nodes, scenario.fleet.gpus_per_node)
        except (RuntimeError, TimeoutError) as exc:  # ControlPlaneUnavailable, a process that exited
            raise ScenarioRunError(f"the {cluster} cluster did not start: {exc}") from None
        identities = DemoIdentities.fresh(names)
        remediator = orchestrator.central_remediator(workdir)
        aggregator = _start_aggregator(scenario, workdir, receiver, identities, remediator)
        stack.callback(aggregator.stop)
        # The demo's admin token is made for this run and dies with it; a fragment never reaches a server log.
        page_url = f"{aggregator.url}/ui/#token={identities.admin_token}"
        observer.progress(f"{FLEET_PAGE_PREFIX}{page_url}")
        fleet = _start_fleet(scenario, orchestrator, names, aggregator, workdir, observer, identities)
        stack.callback(fleet.stop)
        observer.progress("starting the workloads")
        try:
            orchestrator.start_workloads(scenario.workloads, WORKLOAD_TIMEOUT_S)
        except (TimeoutError, ControlPlaneUnavailable) as exc:
            raise ScenarioRunError(f"the workloads did not start: {exc}") from None
        startup_s = time.monotonic() - began
        slower = f" {scale:g} times slower (a large fleet polls less often)" if scale != 1 else ""
        observer.progress(f"fleet up in {startup_s:.1f} s; playing {scenario.name!r}{slower}")
        with aggregator.client(identities.admin_token) as client:
            world = World(orchestrator, client, receiver, TargetResolver(orchestrator, len(names)))
            player = _Player(scenario, world, fleet, aggregator, observer, look_every_s=look_interval(scale))
            results, latencies, timeline_s = player.play()
        alerts = Counter(alert.kind for alert in receiver.alerts)
        summary = RunSummary(
            scenario=scenario.name,
            orchestrator=scenario.orchestrator,
            cluster=cluster,
            nodes=scenario.fleet.nodes,
            time_scale=round(scale, 3),
            passed=all(r.passed for r in results),
            expectations=results,
            fault_to_taint=latencies,
            fault_to_taint_summary=summarise_latencies(latencies),
            alerts_received=dict(sorted(alerts.items())),
            durations=Durations(
                startup_s=round(startup_s, 2),
                timeline_s=round(timeline_s, 2),
                total_s=round(time.monotonic() - began, 2),
            ),
        )
        if keep_s > 0:
            if story_over is not None:
                story_over(summary)
            _keep_serving(observer, page_url, aggregator.url, identities.admin_token, keep_s)
    return summary


def oncall_exports(url: str, token: str) -> str:
    """The shell line that points the on-call commands (``gpuhealth status``...) at this run's aggregator."""
    return f"export GPUHEALTH_AGGREGATOR_URL={url} GPUHEALTH_TOKEN={token}"


def _keep_serving(observer: Observer, page_url: str, url: str, token: str, keep_s: float) -> None:
    """Leave the fleet running so a person can look at what just happened; Ctrl-C (or SIGTERM, which the
    demo turns into the same interruption) ends it early."""
    observer.progress(
        f"the story is over; the fleet page stays up for {keep_s:g} s: {page_url} (Ctrl-C ends)"
    )
    observer.progress(f"for the on-call commands: {oncall_exports(url, token)}")
    try:
        time.sleep(keep_s)
    except KeyboardInterrupt:
        observer.progress("stopping")


def look_interval(scale: float) -> float:
    """How often the expectations are looked at: as often as at 16 nodes, relative to the dilated times."""
    return min(LOOK_EVERY_S * scale, max(LOOK_EVERY_S, SLOWEST_LOOK_EVERY_S))


def _start_aggregator(
    scenario: Scenario,
    workdir: Path,
    receiver: AlertReceiver,
    identities: DemoIdentities,
    remediator: dict[str, Any] | None,
) -> AggregatorChild:
    """The demo's aggregator, a process of its own as in a cluster; with ``remediator``, its central
    remediator drains and requeues (the chart's default)."""
    knobs = scenario.fleet.aggregator
    sink = {
        "name": "demo-receiver",
        "type": "webhook",
        "url": receiver.url,
        "timeout_s": 2.0,
        "backoff_initial_s": 0.5,
        "rate_per_minute": 6000.0,
        "burst": 100,
    }
    server = AggregatorChild(
        workdir,
        None,  # no shared token: each agent has its own, the on-call side an admin's
        remediator=remediator or {"orchestrator": "off"},
        token_file=str(identities.write_token_file(workdir / "tokens.json")),
        sqlite_synchronous="NORMAL",  # a throw-away database: a crash loses nothing that matters
        alert_sinks=[sink],
        **{**knobs.model_dump(), "stale_after_intervals": stale_after_intervals(scenario)},
    )
    try:
        return server.start()
    except AggregatorStartError as exc:
        raise ScenarioRunError(str(exc)) from None


def stale_after_intervals(scenario: Scenario) -> float:
    """The aggregator's stale threshold, in the polling intervals the agents report, for this fleet.

    Agents report their polling interval, but a quiet node only sends a heartbeat every ``heartbeat_s``,
    and a large fleet's agents poll and beat more slowly (``scaled_knobs``): the threshold is the
    scenario's, but never fewer than ``STALE_AFTER_HEARTBEATS`` heartbeats, so a healthy slow fleet is
    never shown stale.
    """
    knobs = scaled_knobs(scenario.fleet)
    heartbeats = STALE_AFTER_HEARTBEATS * knobs.heartbeat_s / knobs.interval_s
    return max(scenario.fleet.aggregator.stale_after_intervals, heartbeats)


def _start_fleet(  # noqa: PLR0917 - each part of the fleet is a distinct collaborator
    scenario: Scenario,
    orchestrator: Orchestrator,
    names: list[str],
    aggregator: AggregatorChild,
    workdir: Path,
    observer: Observer,
    identities: DemoIdentities,
) -> AgentFleet:
    """Every node's agent, started and ready, and known to the aggregator.

    A fleet of ``HOSTED_FROM`` nodes or more runs in agent host processes (``sim/scenario/hosts.py``) when the
    orchestrator can connect agents from another process; a smaller one (or one whose agents need this
    process, such as a partial drain's emulated kubelet) runs here.
    """
    central = aggregator.drains_centrally
    token_files = identities.write_agent_tokens(workdir / "agent-tokens")
    state_root = workdir / "agents"
    step = max(len(names) // 10, 1)

    def every_tenth(what: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            if done % step == 0 or done == total:
                observer.progress(f"{what}: {done}/{total}")

        return report

    def settings(name: str) -> AgentSettings:
        return agent_settings(
            scenario.fleet, name, state_root, aggregator.url, token_files[name], central=central
        )

    timeout_s = max(READY_TIMEOUT_S, READY_S_PER_NODE * len(names))
    connector = orchestrator.connector() if len(names) >= HOSTED_FROM else None
    fleet: AgentFleet
    try:
        if connector is not None and not scenario.fleet.agent.partial_drain:
            reporters = {"started": every_tenth("agents started"), "ready": every_tenth("agents ready")}
            hosted = [HostedNode(name, seed, settings(name)) for seed, name in enumerate(names)]
            fleet = HostedFleet.start(
                scenario.fleet,
                hosted,
                connector,
                ready_timeout_s=timeout_s,
                progress=lambda what, done, total: reporters[what](done, total),
            )
        else:
            running = start_agents(
                orchestrator, scenario.fleet, names, settings, every_tenth("agents started")
            )
            fleet = running
            wait_ready(running.nodes, timeout_s, every_tenth("agents ready"))
    except HostError as exc:
        raise ScenarioRunError(str(exc)) from None
    except TimeoutError as exc:
        fleet.stop()
        raise ScenarioRunError(str(exc)) from None
    try:
        _wait_known(aggregator, identities.admin_token, len(names), timeout_s)
    except TimeoutError as exc:
        fleet.stop()
        raise ScenarioRunError(str(exc)) from None
    return fleet


def _wait_known(aggregator: AggregatorChild, token: str, count: int, timeout_s: float) -> None:
    """Until the aggregator has a report from every node (the breaker's and budget's denominator)."""
    deadline = time.monotonic() + timeout_s
    with aggregator.client(token) as client:
        while client.summary().nodes < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the aggregator heard from fewer than {count} nodes")
            time.sleep(0.1)


class _Player:
    """Plays the timeline's actions and looks at the expectations until each is decided."""

    def __init__(
        self,
        scenario: Scenario,
        world: World,
        fleet: AgentFleet,
        aggregator: AggregatorChild,
        observer: Observer,
        *,
        look_every_s: float = LOOK_EVERY_S,
    ) -> None:
        self.scenario = scenario
        self.look_every_s = look_every_s
        self.world = world
        self.fleet = fleet
        self.aggregator = aggregator
        self.observer = observer
        self.actions = expand(scenario.timeline)
        self.pending = [_Pending(e) for e in scenario.expectations]
        self.probe = TaintProbe(world.orchestrator)
        self.started = 0.0

    def play(self) -> tuple[list[ExpectationResult], list[FaultLatency], float]:
        self.probe.start()
        try:
            results, timeline_s = self._play()
        finally:
            # Also when the timeline cannot go on (a target comes up short): the probe reads the
            # orchestrator, which is stopped as soon as this returns.
            latencies = self.probe.stop()
        return results, latencies, timeline_s

    def _play(self) -> tuple[list[ExpectationResult], float]:
        self.started = time.monotonic()
        last_refresh = -REFRESH_EVERY_S
        hard_end = self.scenario.length_s + GRACE_S
        while True:
            now = time.monotonic() - self.started
            while self.actions and self.actions[0].at <= now:
                self._run(self.actions.pop(0), now)
            self._look(now)
            if self.observer.live and now - last_refresh >= REFRESH_EVERY_S:
                self.observer.refresh(self._state(now))
                last_refresh = now
            if (not self.actions and all(p.result for p in self.pending)) or now > hard_end:
                break
            time.sleep(self.look_every_s)
        now = time.monotonic() - self.started
        results = [p.result or self._undecided(p, now) for p in self.pending]
        if self.observer.live:
            self.observer.refresh(self._state(now))
        return results, now

    # --- actions ---------------------------------------------------------------------------------------

    def _run(self, action: Action, now: float) -> None:
        injection = action.injection
        fault = injection.fault
        if isinstance(fault, ApiOutageFault):
            self.world.orchestrator.api_outage(fault.seconds)
            self.observer.event(now, f"{self.scenario.orchestrator} API down for {fault.seconds:g} s")
            return
        if isinstance(fault, AggregatorOutageFault):
            self._aggregator_outage(fault.seconds)
            self.observer.event(now, f"aggregator down for {fault.seconds:g} s")
            return
        assert injection.target is not None  # the model requires one for every GPU fault
        try:
            targets = self.world.targets.resolve(injection.target, injection)
        except TargetError as exc:
            raise ScenarioRunError(f"injection {injection.label()}: {exc}") from None
        self.world.targets.record_hit(injection.label(), targets)
        applied = ClearFault() if action.repair else fault
        started = time.monotonic()
        if action.play == 0 and not action.repair and not isinstance(fault, ClearFault):
            for name in targets:  # before the fault goes in: a node tainted already is not timed
                self.probe.watch(injection.label(), name, started)
        try:
            self.fleet.apply_fault(targets, injection.gpu, applied)
        except FabricFaultError as exc:
            raise ScenarioRunError(f"injection {injection.label()}: {exc}") from None
        where = ", ".join(targets[:4]) + (f" (+{len(targets) - 4})" if len(targets) > 4 else "")
        what = "repaired" if action.repair else describe_fault(fault)
        self.observer.event(now, f"{what} on GPU {injection.gpu} of {where}")

    def _aggregator_outage(self, seconds: float) -> None:
        self.aggregator.stop()
        timer = threading.Timer(seconds, self.aggregator.start)
        timer.daemon = True
        timer.start()

    # --- expectations ----------------------------------------------------------------------------------

    def _look(self, now: float) -> None:
        for pending in self.pending:
            if pending.result is None:
                self._look_at(pending, now)

    def _look_at(self, pending: _Pending, now: float) -> None:
        expectation = pending.expectation
        window = expectation.during
        if now < expectation.first_look:
            return
        try:
            seen = look_safely(expectation, self.world)
        except TargetError as exc:
            seen = Look(False, str(exc))
        pending.looks += 1
        pending.last = seen
        if window is not None:
            if not seen.holds:
                self._decide(pending, now, passed=False)
            elif now >= window.end:
                self._decide(pending, now, passed=True)
        elif seen.holds:
            self._decide(pending, now, passed=True)
        elif expectation.by is not None and now > expectation.by:
            self._decide(pending, now, passed=False)

    def _decide(self, pending: _Pending, now: float, *, passed: bool) -> None:
        expectation = pending.expectation
        observed = pending.last.observed if pending.last else "never looked at"
        pending.result = ExpectationResult(
            name=expectation.name,
            expected=expected_text(expectation),
            observed=observed,
            passed=passed,
            at_s=round(now, 2),
        )
        self.observer.event(now, f"{'PASS' if passed else 'FAIL'} {expectation.name}: {observed}")

    def _undecided(self, pending: _Pending, now: float) -> ExpectationResult:
        holds = pending.expectation.during is not None and pending.looks > 0
        return ExpectationResult(
            name=pending.expectation.name,
            expected=expected_text(pending.expectation),
            observed=pending.last.observed if pending.last else "never looked at",
            passed=holds,
            at_s=round(now, 2),
        )

    def _state(self, now: float) -> LiveState:
        return LiveState(
            at_s=now,
            length_s=self.scenario.length_s,
            nodes=self.world.orchestrator.nodes(),
            job=self.world.orchestrator.job(),
            results={p.expectation.name: p.result for p in self.pending},
            alerts=len(self.world.receiver.alerts),
        )
