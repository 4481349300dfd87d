"""SIGKILL at a random moment of an incident: the aggregator (with its central remediator, on SQLite and on
PostgreSQL) and the broken node's agent. Each trial breaks one node of a JobSet, waits a seeded random time
(before the taint, mid-drain, mid-requeue or mid-alert), kills the process, starts it again and checks every
invariant once the fleet is steady."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fault_trials import Trials, trials
from fault_world import FaultWorld

from tests.faults.conftest import MakeWorld

STEADY_WITHIN_S = 60.0
KILL_WINDOW_S = 1.0  # an incident runs from XID to requeued JobSet in about 0.5 s here


def incident(world: FaultWorld) -> str:
    """A JobSet on two nodes, every agent started (the node to break alone in its process); returns it."""
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    world.start_agents([bad])
    world.start_agents([n for n in world.names if n != bad])
    return bad


def kill_aggregator_once(world: FaultWorld, run: Trials) -> None:
    bad = incident(world)
    delay = run.rng.uniform(0, KILL_WINDOW_S)
    world.break_node(bad)
    time.sleep(delay)
    moment = f"{world.phase(bad)} (+{delay:.2f} s)"
    world.aggregator.kill()
    world.aggregator.start()
    run.record(world, moment=moment, healed_at=world.recorder.now(), within_s=STEADY_WITHIN_S)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(2)))
def test_sigkill_of_the_aggregator_and_its_remediator_on_sqlite(
    make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    kill_aggregator_once(make_world(), trials_of("sigkill-aggregator-sqlite"))
