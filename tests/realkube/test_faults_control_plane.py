"""Faults on the real stack: etcd or kube-apiserver killed (SIGKILL) while the central remediator drains a
JobSet's node, down for a seeded random time, then started again with the same arguments.

The runbook of test_runbook_jobset.py (five KWOK GPU nodes, a 4-node JobSet with the failure policy of
docs/requeue.md, the real JobSet manager and kube-scheduler, real agents that order the drain from the
aggregator's remediator) with the fault in the middle of the drain. Held: the drain ends, the JobSet is
restarted exactly once and runs again on four new pods off the broken node, no pod is placed on it, its taint
stays, and no healthy node is tainted or cordoned. It lives with the realkube tests because it needs their
shared control plane (tests/support/README.md: a test goes where what it needs puts it); the fault suite's
trials and tally (fault_trials) are the same.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_plane import ControlPlane
from fault_trials import TALLY, seeded, trials
from kube_stack import Controller
from plane_faults import kill_and_restart
from realkube import Cluster
from stack_world import STACK_WAIT_S, StackWorld, uids
from waiting import wait_until

from tests.realkube.test_runbook_jobset import read_jobset, start_jobset

NODES = 5


@pytest.fixture
def world(
    kube_stack: ControlPlane, jobset: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StackWorld]:
    cluster = Cluster(kube_stack, nodes=NODES, kwok=True, namespace_labels=jobset.namespace_label)
    made = StackWorld(cluster, tmp_path, monkeypatch)
    yield made
    made.close()
    cluster.close()


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(trials(1)))
@pytest.mark.parametrize("component", ["etcd", "kube-apiserver"])
def test_a_control_plane_restart_while_the_remediator_drains(
    world: StackWorld, request: pytest.FixtureRequest, component: str, trial: int
) -> None:
    run = seeded(request.node.name, f"restart-{component}")
    cluster = world.cluster
    labels = start_jobset(world, "llm")
    before = cluster.running(**labels)
    bad = before[0]["spec"]["nodeName"]
    world.agent(bad)
    down_s = run.rng.uniform(0.5, 4.0)

    fault = time.monotonic()
    world.break_node(bad)  # tainted, cordoned, the drain ordered; the remediator drains from here
    back_s = kill_and_restart(cluster.plane, component, down_s=down_s)
    healed = time.monotonic()

    def drained_and_running_again() -> bool:
        world.tick(bad)
        pods = cluster.running(**labels)
        return len(pods) == 4 and not uids(before) & uids(pods)

    assert wait_until(drained_and_running_again, timeout=STACK_WAIT_S, interval=0.5), (
        f"seed {run.seed}: the JobSet never ran again on 4 new pods after {component} was down {down_s:.1f} s"
    )
    recovery = time.monotonic() - healed
    time.sleep(2)  # long enough for a second restart to show, if one were made
    status = read_jobset(cluster, "llm").get("status") or {}
    healthy = [n for n in cluster.node_names if n != bad]
    touched = [
        n
        for n in healthy
        if cluster.node(n)["spec"].get("unschedulable")
        or any(t["key"] == "gpuhealth.io/unhealthy" for t in cluster.node(n)["spec"].get("taints") or [])
    ]
    held = {
        "one_restart_per_incident": status.get("restarts") == 1,
        "healthy_untouched": not touched,
        "quarantine_kept": world.tainted(bad) and not world.placements.on(bad, since=fault),
    }
    line = {
        "fault": f"restart-{component}",
        "seed": run.seed,
        "moment": f"mid-drain, down {down_s:.1f} s",
        "recovery_s": round(recovery, 3),
        "during": {"api_back_after_s": round(back_s, 2)},
        "held": held,
        "at": time.time(),
    }
    print(json.dumps(line))
    if TALLY:
        with Path(TALLY).open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(line) + "\n")
    assert all(held.values()), f"seed {run.seed}: {held}, JobSet status {status}, touched {touched}"
