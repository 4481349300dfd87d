"""Partitions: the broken node's agent in its own network namespace, with one veth link to the aggregator
and one to the API server. A seeded random moment of the incident, a fault on one link (every packet
dropped, or the link slowed to a crawl), held for a seeded random time, then healed; every invariant is
checked once the fleet is steady, and what the product did during the fault is tallied.

What the product promises during the fault (docs/reliability.md), asserted where the trial can tell: with the
aggregator cut off before the XID, the agent still marks and taints its node, and no drain starts until the
aggregator is back. With the API server cut off, the agent's pass waits on the API server's timeouts, so the
aggregator hears of the incident late (the tally's ``during`` shows it); everything follows once healed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fault_trials import Trials, trials
from fault_world import FaultWorld
from netns import Link, Namespace

from tests.faults.conftest import MakeWorld

STEADY_WITHIN_S = 90.0
MOMENTS = ("before-taint", "tainted", "drain-ordered", "mid-drain")


def partition_once(world: FaultWorld, namespace: Namespace, run: Trials, path: str, fault: str) -> None:
    to_aggregator, to_api = namespace.links
    link: Link = to_aggregator if path == "aggregator" else to_api
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    world.start_agents([bad], netns=namespace.name)
    world.start_agents([n for n in world.names if n != bad])
    wanted = run.rng.choice(MOMENTS)
    hold_s = run.rng.uniform(2.0, 6.0)

    def cut() -> None:
        if fault == "drop":
            link.drop()
        else:
            link.shape("16kbit")  # a 2 kB report takes a second, a permit round trip several

    if wanted == "before-taint":
        cut()
        world.break_node(bad)
        moment = wanted
    else:
        world.break_node(bad)
        moment = world.reach(bad, wanted)
        cut()
    time.sleep(hold_s)
    during = {
        "tainted": world.recorder.tainted(bad),
        "drain": world.drain_phase(bad),
        "evicted": world.evicted(bad),
        "incident_known": world.incident_known(bad),
    }
    if wanted == "before-taint" and path == "aggregator" and fault == "drop":
        # the safety rule: marked and tainted without the aggregator, never drained without a permit
        assert during["tainted"], f"seed {run.seed}: no taint while the aggregator was cut off"
        assert during["drain"] is None and not during["evicted"], f"seed {run.seed}: drained without a permit"
    link.heal()
    run.record(
        world,
        moment=f"{moment}, {fault} {hold_s:.1f} s",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
        during=during,
    )


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["drop", "slow"])
@pytest.mark.parametrize("trial", range(trials(1)))
def test_partition_between_an_agent_and_the_aggregator(
    netns_pair: Namespace, make_world: MakeWorld, trials_of: Callable[[str], Trials], fault: str, trial: int
) -> None:
    to_aggregator, to_api = netns_pair.links
    world = make_world(aggregator_host=to_aggregator.host_ip, api_host=to_api.host_ip)
    partition_once(world, netns_pair, trials_of(f"partition-aggregator-{fault}"), "aggregator", fault)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["drop", "slow"])
@pytest.mark.parametrize("trial", range(trials(1)))
def test_partition_between_an_agent_and_the_api_server(
    netns_pair: Namespace, make_world: MakeWorld, trials_of: Callable[[str], Trials], fault: str, trial: int
) -> None:
    to_aggregator, to_api = netns_pair.links
    world = make_world(aggregator_host=to_aggregator.host_ip, api_host=to_api.host_ip)
    partition_once(world, netns_pair, trials_of(f"partition-api-{fault}"), "api", fault)
