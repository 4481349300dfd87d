"""A full disk: a small tmpfs under the broken node's agent state directory (its state file and outbox), or
under the aggregator's SQLite database, filled to the last byte at a seeded random moment of an incident,
held for a seeded random time, then freed. Every invariant is checked once the fleet is steady; what the
product did while the disk was full is tallied."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fault_trials import Trials, trials
from fault_world import FaultWorld
from tmpfs import TmpfsDisk

from tests.faults.conftest import MakeDisk, MakeWorld

# A trial waits for its moment (up to REACH_TIMEOUT_S), then for the steady state (60 to 90 s) and the
# history: more than the suite's default per-test timeout when a trial goes wrong.
pytestmark = pytest.mark.timeout(300)

STEADY_WITHIN_S = 90.0
MOMENTS = ("before-taint", "tainted", "drain-ordered", "mid-drain", "mid-alert")


def full_once(world: FaultWorld, run: Trials, disk: TmpfsDisk, *, bad: str) -> None:
    wanted = run.moment(MOMENTS)
    hold_s = run.rng.uniform(2.0, 5.0)
    if wanted == "before-taint":
        disk.fill()
        world.break_node(bad)
        moment = wanted
    else:
        world.break_node(bad)
        moment = world.reach(bad, wanted)
        disk.fill()
    time.sleep(hold_s)
    during = {
        "tainted": world.recorder.tainted(bad),
        "drain": world.drain_phase(bad),
        "evicted": world.evicted(bad),
        "incident_known": world.incident_known(bad),
    }
    disk.free()
    run.record(
        world,
        moment=f"{moment}, full {hold_s:.1f} s",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
        during=during,
    )


def start(world: FaultWorld, *, bad_first: Callable[[str], None] | None = None) -> str:
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    if bad_first is not None:
        bad_first(bad)
    world.start_agents([bad])
    world.start_agents([n for n in world.names if n != bad])
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_a_full_disk_under_the_agents_state_file_and_outbox(
    make_disk: MakeDisk, make_world: MakeWorld, trials_of: Callable[[str], Trials], trial: int
) -> None:
    world = make_world()
    disks: list[TmpfsDisk] = []
    bad = start(world, bad_first=lambda node: disks.append(make_disk(world.root / "state" / node, "512k")))
    full_once(world, trials_of("full-disk-agent"), disks[0], bad=bad)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
def test_a_full_disk_under_the_aggregators_sqlite_database(
    make_disk: MakeDisk, make_world: MakeWorld, tmp_path: Path, trials_of: Callable[[str], Trials], trial: int
) -> None:
    disk = make_disk(tmp_path / "sqlite", "64m")
    world = make_world(database_url=f"sqlite:///{tmp_path / 'sqlite' / 'aggregator.db'}")
    bad = start(world)
    full_once(world, trials_of("full-disk-sqlite"), disk, bad=bad)
