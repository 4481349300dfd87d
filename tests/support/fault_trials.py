"""Trials of the fault suite: how many (CI mode or soak), their seeded randomness, and their tally.

``GPUHEALTH_FAULT_SOAK=N`` runs every fault N times (the soak, by hand); unset, each fault runs its CI
trials. ``GPUHEALTH_FAULT_SEED`` replays a run: the seed is printed with every trial's moment.
``GPUHEALTH_FAULT_TALLY=FILE`` appends one JSON line per trial (fault, moment, recovery, invariants held),
the figures of docs/reliability.md. ``GPUHEALTH_FAULT_MOMENT=M`` puts every trial whose fault can be injected
at moment ``M`` there (the draw is still made, so the rest of a replayed trial is the same): to replay or
soak one moment of an incident.
"""

from __future__ import annotations

import json
import os
import random
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fault_invariants import check, held
from fault_world import FaultWorld

SOAK = int(os.environ.get("GPUHEALTH_FAULT_SOAK", "0") or 0)
SEED = int(os.environ.get("GPUHEALTH_FAULT_SEED", "0") or 0) or random.SystemRandom().randrange(1, 2**31)
TALLY = os.environ.get("GPUHEALTH_FAULT_TALLY")  # a JSON-lines file every trial is appended to
MOMENT = os.environ.get("GPUHEALTH_FAULT_MOMENT") or None  # every trial at this moment, where it can be


def trials(ci: int) -> int:
    """How many times a fault is injected: ``ci`` in CI mode, the soak's count in soak mode."""
    return SOAK or ci


@dataclass
class Trials:
    """The seeded randomness of one test and the tally of its trials."""

    fault: str
    rng: random.Random
    seed: int
    recoveries: list[float] = field(default_factory=list)

    def moment(self, choices: Sequence[str]) -> str:
        """The moment of the incident to inject the fault at: drawn from ``choices``, or ``MOMENT`` when set
        and one of them (the draw is made all the same, so what the trial draws next does not change)."""
        drawn = self.rng.choice(choices)
        return MOMENT if MOMENT is not None and MOMENT in choices else drawn

    def record(
        self,
        world: FaultWorld,
        *,
        moment: str,
        healed_at: float | None,
        within_s: float,
        during: Mapping[str, object] | None = None,
    ) -> None:
        """Wait for the steady state, check every invariant on the history, and tally the trial."""
        steady_at = world.wait_steady(within_s)
        history = world.history(healed_at=healed_at, steady_at=steady_at, within_s=within_s)
        violations = check(history)
        recovery = None if steady_at is None or healed_at is None else round(steady_at - healed_at, 3)
        if recovery is not None:
            self.recoveries.append(recovery)
        line = {
            "fault": self.fault,
            "seed": self.seed,
            "moment": moment,
            "recovery_s": recovery,
            "during": dict(during or {}),
            "held": held(violations),
            "at": time.time(),
        }
        if steady_at is None:  # what still kept the fleet from its steady state when the wait ended
            line["unsteady"] = world.last_unsteady
        print(json.dumps(line))
        if TALLY:
            with Path(TALLY).open("a", encoding="utf-8") as sink:
                sink.write(json.dumps(line) + "\n")
        why = f" (not steady: {world.last_unsteady}; logs in {world.root})" if steady_at is None else ""
        replay = f"seed {self.seed} (GPUHEALTH_FAULT_SEED={SEED} replays the run), {moment}: "
        assert not violations, replay + "; ".join(map(str, violations)) + why


def seeded(test_name: str, fault: str) -> Trials:
    """The trials of ``fault`` in the test ``test_name``, their randomness seeded from the run's seed."""
    seed = SEED ^ (zlib.crc32(test_name.encode()) & 0xFFFF)
    print(f"fault {fault}: seed {seed} (GPUHEALTH_FAULT_SEED={SEED} replays the run)")
    return Trials(fault, random.Random(seed), seed)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def _all_held(held: object) -> bool:
    return isinstance(held, dict) and all(held.values())


def summarize(lines: list[dict[str, object]]) -> str:
    """The tally as docs/reliability.md's table: per fault, trials, invariants held, recovery P50 / P99."""
    by_fault: dict[str, list[dict[str, object]]] = {}
    for line in lines:
        by_fault.setdefault(str(line["fault"]), []).append(line)
    rows = [
        "| fault | injected | every invariant held | recovery P50 | recovery P99 |",
        "|---|---|---|---|---|",
    ]
    for fault, trials_of_fault in sorted(by_fault.items()):
        held_all = sum(1 for t in trials_of_fault if _all_held(t["held"]))
        recoveries = [float(str(t["recovery_s"])) for t in trials_of_fault if t["recovery_s"] is not None]
        p50 = f"{_percentile(recoveries, 0.5):.2f} s" if recoveries else "-"
        p99 = f"{_percentile(recoveries, 0.99):.2f} s" if recoveries else "-"
        rows.append(
            f"| {fault} | {len(trials_of_fault)} | {held_all} of {len(trials_of_fault)} | {p50} | {p99} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    tally = [json.loads(line) for line in Path(sys.argv[1]).read_text(encoding="utf-8").splitlines() if line]
    print(summarize(tally))
