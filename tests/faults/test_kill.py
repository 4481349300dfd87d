"""SIGKILL at a random moment of an incident: the aggregator with its central remediator (one process; on
SQLite and on PostgreSQL), one of two replicas, the broken node's agent; and a PostgreSQL primary failing
over to its streaming standby under two replicas.

Each trial runs a JobSet on two of four nodes, breaks one of its nodes (GPU 0 falls off the bus), waits for a
moment of the incident drawn from the trial's seeded randomness (before the taint, tainted, mid-drain,
mid-requeue, mid-alert delivery, mid-recovery), kills the process with SIGKILL, starts it again and checks
every invariant once the fleet is steady (fault_invariants)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fault_trials import Trials, trials
from fault_world import MOMENTS, AgentHost, FaultWorld
from pg_pair import PostgresPair

from tests.faults.conftest import MakeWorld

# A trial waits for its moment (up to REACH_TIMEOUT_S), then for the steady state (60 to 90 s) and the
# history: more than the suite's default per-test timeout when a trial goes wrong.
pytestmark = pytest.mark.timeout(300)

STEADY_WITHIN_S = 60.0
JITTER_S = 0.05


def incident(world: FaultWorld) -> tuple[str, AgentHost]:
    """The aggregator, a JobSet on two nodes, every agent (the node to break alone in its process)."""
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    host = world.start_agents([bad])
    world.start_agents([n for n in world.names if n != bad])
    return bad, host


def kill_once(world: FaultWorld, run: Trials, target: str) -> None:
    bad, host = incident(world)
    wanted = run.moment(MOMENTS)
    jitter = run.rng.uniform(0, JITTER_S)
    world.break_node(bad)
    moment = world.reach(bad, wanted)
    time.sleep(jitter)
    victim = world.aggregator if target == "aggregator" else host
    victim.kill()
    victim.start()
    run.record(
        world,
        moment=f"{moment} +{jitter * 1000:.0f} ms",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
    )


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_sigkill_of_the_aggregator_and_its_remediator_on_sqlite(
    make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    kill_once(make_world(), trials_of("sigkill-aggregator-sqlite"), "aggregator")


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_sigkill_of_the_aggregator_and_its_remediator_on_postgresql(
    postgres_url: str, make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    kill_once(make_world(database_url=postgres_url), trials_of("sigkill-aggregator-postgresql"), "aggregator")


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_sigkill_of_the_broken_nodes_agent(
    make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    kill_once(make_world(), trials_of("sigkill-agent"), "agent")


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_sigkill_of_one_of_two_aggregator_replicas_on_postgresql(
    postgres_url: str, make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    """Two aggregators on one PostgreSQL, each with its central remediator; the agents report to the
    second. The first is killed at a seeded random moment and stays down: whatever it held (a drain's lease,
    an alert's delivery claim) the second takes over once the lease runs out."""
    run = trials_of("sigkill-replica-postgresql")
    world = make_world(database_url=postgres_url)
    world.aggregator.start()
    survivor = world.replica("remediator-1").start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    world.start_agents([bad], aggregator_url=survivor.url)
    world.start_agents([n for n in world.names if n != bad], aggregator_url=survivor.url)
    wanted = run.moment(MOMENTS)
    world.break_node(bad)
    moment = world.reach(bad, wanted)
    owner = world.drain_owner(bad)
    world.aggregator.kill()
    run.record(
        world,
        moment=f"{moment}, drain held by {owner}",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
        during={"drain_owner": owner},
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trial", range(trials(1)))
def test_postgresql_primary_failover_under_two_aggregator_replicas(
    postgres_pair: PostgresPair, make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    """A PostgreSQL primary with a synchronous streaming standby, two aggregators in front (the agents report
    to the second): the primary dies at a seeded random moment of an incident and the standby is promoted.
    The aggregators find it through their multi-host URL; nothing acknowledged is lost."""
    run = trials_of("postgresql-failover")
    world = make_world(database_url=postgres_pair.url)
    world.aggregator.start()
    second = world.replica("remediator-1").start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    world.start_agents([bad], aggregator_url=second.url)
    world.start_agents([n for n in world.names if n != bad], aggregator_url=second.url)
    wanted = run.moment(MOMENTS)
    world.break_node(bad)
    moment = world.reach(bad, wanted)
    postgres_pair.fail_over()
    run.record(world, moment=moment, healed_at=world.recorder.now(), within_s=STEADY_WITHIN_S)
