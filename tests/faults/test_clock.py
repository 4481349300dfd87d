"""A wall clock stepped forward or back, on the broken node's agent or on the aggregator, at a seeded
random moment of an incident, through the product's clock seam (``stepped_clock``: the process's wall clock
moves, its monotonic clock does not, as with a real step). The step is never undone (a real one is not
either); every invariant is checked once the fleet is steady."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fault_trials import Trials, trials
from fault_world import FaultWorld

from tests.faults.conftest import MakeWorld

# A trial waits for its moment (up to REACH_TIMEOUT_S), then for the steady state (60 to 90 s) and the
# history: more than the suite's default per-test timeout when a trial goes wrong.
pytestmark = pytest.mark.timeout(300)

STEADY_WITHIN_S = 60.0
MOMENTS = ("before-taint", "tainted", "drain-ordered", "mid-drain", "mid-alert")
STEPS_S = (-3600.0, -600.0, 600.0, 3600.0)


def step_once(world: FaultWorld, run: Trials, who: str) -> None:
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    world.start_agents([bad])
    world.start_agents([n for n in world.names if n != bad])
    wanted = run.moment(MOMENTS)
    step = run.rng.choice(STEPS_S)
    target = bad if who == "node" else "aggregator"
    if wanted == "before-taint":
        world.step_clock(target, step)
        world.break_node(bad)
        moment = wanted
    else:
        world.break_node(bad)
        moment = world.reach(bad, wanted)
        world.step_clock(target, step)
    run.record(
        world,
        moment=f"{moment}, step {step:+.0f} s",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
    )


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
@pytest.mark.parametrize("who", ["node", "aggregator"])
def test_a_clock_step(
    make_world: MakeWorld, trials_of: Callable[[str], Trials], who: str, trial: int
) -> None:
    step_once(make_world(), trials_of(f"clock-step-{who}"), who)
