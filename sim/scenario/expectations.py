"""Each expectation kind: what it expects (in words) and what is observed now, with whether it holds."""

from __future__ import annotations

from dataclasses import dataclass

from agent.uplink.client import AggregatorClient, AggregatorError
from sim.scenario.model import (
    AlertExpectation,
    BreakerExpectation,
    CordonedExpectation,
    DrainedExpectation,
    Expectation,
    JobRestartedExpectation,
    MaxDrainedExpectation,
    NodeStateExpectation,
    PermitsRefusedExpectation,
    TaintExpectation,
    TimelineExpectation,
    WorkloadPodsExpectation,
)
from sim.scenario.orchestrator import NodeView, Orchestrator
from sim.scenario.receiver import AlertReceiver
from sim.scenario.targets import TargetResolver

EVENTS_LIMIT = 1000
# Marks every incident sets and clears; a timeline shown in the summary leaves them out.
BOOKKEEPING_ACTIONS = frozenset({"condition", "label", "taint", "annotate", "event", "setunhealthygpus"})


@dataclass(frozen=True)
class Look:
    """One look at an expectation: does it hold now, and what was seen."""

    holds: bool
    observed: str


@dataclass
class World:
    """Everything an expectation may look at."""

    orchestrator: Orchestrator
    aggregator: AggregatorClient
    receiver: AlertReceiver
    targets: TargetResolver


def expected_text(expectation: Expectation) -> str:  # noqa: PLR0911 - one line per kind
    """The expectation in words, for the summary."""
    match expectation:
        case NodeStateExpectation():
            return f"{expectation.target.describe()}: state {' or '.join(expectation.states)}"
        case TaintExpectation():
            value = f"={expectation.value}" if expectation.value else ""
            where = expectation.target.describe()
            return f"{where}: {'tainted' + value if expectation.present else 'not tainted'}"
        case CordonedExpectation():
            where = expectation.target.describe()
            return f"{where}: {'cordoned' if expectation.cordoned else 'not cordoned'}"
        case DrainedExpectation():
            where = expectation.target.describe()
            return f"{where}: {'drained' if expectation.drained else 'still running its pods'}"
        case JobRestartedExpectation():
            count = f"{'exactly' if expectation.exactly else 'at least'} {expectation.restarts}"
            healthy = ", every pod Running on a healthy node" if expectation.running_on_healthy else ""
            return f"training job restarted {count} time(s){healthy}"
        case BreakerExpectation():
            return f"breaker {expectation.state}"
        case PermitsRefusedExpectation():
            where = f" to {expectation.target.describe()}" if expectation.target else ""
            return f"at least {expectation.at_least} permit(s) refused{where}"
        case AlertExpectation():
            where = f" for {expectation.target.describe()}" if expectation.target else ""
            return f"at least {expectation.at_least} {expectation.alert} alert(s){where}"
        case MaxDrainedExpectation():
            return f"at most {expectation.nodes} node(s) cordoned for a drain"
        case TimelineExpectation():
            return f"{expectation.target.describe()}: actions {' -> '.join(expectation.actions)} done"
        case WorkloadPodsExpectation():
            where = "the other nodes" if expectation.elsewhere else expectation.target.describe()
            how = "at least" if expectation.at_least else "exactly"
            return f"{where}: {how} {expectation.count} workload pod(s)"


def look(expectation: Expectation, world: World) -> Look:  # noqa: PLR0911 - one line per kind
    """Check the expectation against the world now."""
    match expectation:
        case NodeStateExpectation():
            views = _views(expectation, world)
            bad = [v for v in views if (v.state or "unset") not in expectation.states]
            return Look(not bad, _states(views))
        case TaintExpectation():
            views = _views(expectation, world)
            return Look(all(_taint_matches(v, expectation) for v in views), _taints(views))
        case CordonedExpectation():
            views = _views(expectation, world)
            holds = all(v.cordoned == expectation.cordoned for v in views)
            return Look(
                holds, ", ".join(f"{v.name} {'cordoned' if v.cordoned else 'schedulable'}" for v in views)
            )
        case DrainedExpectation():
            views = _views(expectation, world)
            holds = all((v.cordoned and v.workload_pods == 0) == expectation.drained for v in views)
            return Look(holds, ", ".join(f"{v.name}: {v.workload_pods} workload pod(s)" for v in views))
        case JobRestartedExpectation():
            return _job(expectation, world)
        case BreakerExpectation():
            state = world.aggregator.breaker_status().state
            return Look(state == expectation.state, f"breaker {state}")
        case PermitsRefusedExpectation():
            return _permits_refused(expectation, world)
        case AlertExpectation():
            nodes = (
                set(world.targets.resolve(expectation.target, expectation)) if expectation.target else None
            )
            count = world.receiver.count(expectation.alert, nodes)
            return Look(count >= expectation.at_least, f"{count} {expectation.alert} alert(s)")
        case MaxDrainedExpectation():
            cordoned = [v.name for v in world.orchestrator.nodes() if v.cordoned]
            shown = ", ".join(cordoned[:5]) + (" ..." if len(cordoned) > 5 else "")
            return Look(len(cordoned) <= expectation.nodes, f"{len(cordoned)} cordoned ({shown or 'none'})")
        case TimelineExpectation():
            return _timeline(expectation, world)
        case WorkloadPodsExpectation():
            return _workload_pods(expectation, world)


def look_safely(expectation: Expectation, world: World) -> Look:
    """:func:`look`, with an aggregator that does not answer read as "does not hold (yet)"."""
    try:
        return look(expectation, world)
    except AggregatorError as exc:
        return Look(False, f"aggregator did not answer: {exc}")


def _views(
    expectation: NodeStateExpectation | TaintExpectation | CordonedExpectation | DrainedExpectation,
    world: World,
) -> list[NodeView]:
    names = world.targets.resolve(expectation.target, expectation)
    return [world.orchestrator.node(name) for name in names]


def _taint_matches(view: NodeView, expectation: TaintExpectation) -> bool:
    if not expectation.present:
        return view.taint is None
    return view.taint is not None and (expectation.value is None or view.taint == expectation.value)


def _states(views: list[NodeView]) -> str:
    return ", ".join(f"{v.name} {v.state or 'unset'}" for v in views)


def _taints(views: list[NodeView]) -> str:
    return ", ".join(
        f"{v.name} {'tainted=' + v.taint if v.taint is not None else 'untainted'}" for v in views
    )


def _job(expectation: JobRestartedExpectation, world: World) -> Look:
    job = world.orchestrator.job()
    if job is None:
        return Look(False, "no training job")
    if expectation.exactly:
        restarted = job.restarts == expectation.restarts
    else:
        restarted = job.restarts >= expectation.restarts
    # Only the job's own nodes: listing a thousand-node fleet on every look starves the timeline.
    tainted = [name for name in job.running_nodes if world.orchestrator.node(name).taint is not None]
    on_healthy = len(job.running_nodes) == job.expected_pods and not tainted
    holds = restarted and (on_healthy or not expectation.running_on_healthy)
    where = ", ".join(job.running_nodes) or "nowhere"
    return Look(holds, f"{job.restarts} restart(s); {len(job.running_nodes)} pod(s) Running on {where}")


def _workload_pods(expectation: WorkloadPodsExpectation, world: World) -> Look:
    names = world.targets.resolve(expectation.target, expectation)
    if expectation.elsewhere:
        others = [view for view in world.orchestrator.nodes() if view.name not in set(names)]
        counts = {"elsewhere": sum(view.workload_pods for view in others)}
    else:
        counts = {name: world.orchestrator.node(name).workload_pods for name in names}
    wanted = expectation.count
    holds = all(n >= wanted if expectation.at_least else n == wanted for n in counts.values())
    return Look(holds, ", ".join(f"{where}: {n} workload pod(s)" for where, n in counts.items()))


def _permits_refused(expectation: PermitsRefusedExpectation, world: World) -> Look:
    nodes = set(world.targets.resolve(expectation.target, expectation)) if expectation.target else None
    refused = [
        event
        for event in world.aggregator.events(limit=EVENTS_LIMIT)
        if event.kind == "permit_refused" and (nodes is None or event.node in nodes)
    ]
    times = sum(event.count for event in refused)  # a refusal repeated is one row with a count
    return Look(times >= expectation.at_least, f"{times} permit(s) refused")


def _timeline(expectation: TimelineExpectation, world: World) -> Look:
    """Each targeted node's successful actions, oldest first, contain the expected ones in order."""
    seen: list[str] = []
    holds = True
    for name in world.targets.resolve(expectation.target, expectation):
        history = world.aggregator.events(node=name, limit=EVENTS_LIMIT)
        done = [
            str(event.details.get("action"))
            for event in sorted(history, key=lambda event: (event.at, event.id))
            if event.kind == "action" and event.details.get("result") == "ok"
        ]
        holds = holds and _in_order(expectation.actions, done)
        shown = [action for action in _first_of_each(done) if action not in BOOKKEEPING_ACTIONS]
        seen.append(f"{name}: {' -> '.join(shown) or 'no action'}")
    return Look(holds, "; ".join(seen))


def _in_order(wanted: list[str], done: list[str]) -> bool:
    remaining = iter(done)
    return all(action in remaining for action in wanted)  # consumes the iterator: order matters


def _first_of_each(actions: list[str]) -> list[str]:
    """Each action once, where it first happened (a step may be reported again on a later pass)."""
    return list(dict.fromkeys(actions))
