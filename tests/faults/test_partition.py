"""Partitions: the broken node's agent in its own network namespace, with one veth link to the aggregator
and one to the API server. A seeded random moment of the incident, a fault on one path (every packet
dropped, the link slowed to a crawl, or a fixed delay each way), held for a seeded random time, then healed;
every invariant is checked once the fleet is steady, and what the product did during the fault is tallied.

The delay is a userspace relay inside the namespace (``delay_relay.py``: this kernel has no ``sch_netem``):
the agent reaches the service through it, and the test turns its delay on and off.

What the product promises during the fault (docs/reliability.md), asserted where the trial can tell: with the
aggregator cut off before the XID, the agent still marks and taints its node, and no drain starts until the
aggregator is back. With the API server cut off, the agent's pass waits on the API server's timeouts, so the
aggregator hears of the incident late (the tally's ``during`` shows it); everything follows once healed.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fault_trials import Trials, trials
from fault_world import FaultWorld
from netns import Link, Namespace

from sim.kube.kubeconfig import write_kubeconfig
from tests.faults.conftest import MakeWorld

# A trial waits for its moment (up to REACH_TIMEOUT_S), then for the steady state (60 to 90 s) and the
# history: more than the suite's default per-test timeout when a trial goes wrong.
pytestmark = pytest.mark.timeout(300)

STEADY_WITHIN_S = 90.0
MOMENTS = ("before-taint", "tainted", "drain-ordered", "mid-drain")
RELAY = Path(__file__).with_name("delay_relay.py")
RELAY_PORT = 18080  # on the namespace's own loopback: nothing else listens there
DELAYS_MS = (200.0, 1500.0)  # one way; the agent's aggregator timeout is 2 s, so some round trips exceed it


class DelayedPath:
    """A delaying relay inside ``namespace``, on its loopback, to ``target`` (``host:port``) on the host."""

    def __init__(self, namespace: Namespace, target: str, control: Path) -> None:
        self.control = control
        control.write_text("0", encoding="utf-8")
        host, port = target.rsplit(":", 1)
        argv = ["ip", "netns", "exec", namespace.name, sys.executable, str(RELAY)]
        argv += ["127.0.0.1", str(RELAY_PORT), host, port, str(control)]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == b"ready", f"the delaying relay did not start: {line!r}"
        self.url = f"http://127.0.0.1:{RELAY_PORT}"

    def delay(self, milliseconds: float) -> None:
        self.control.write_text(f"{milliseconds:.0f}", encoding="utf-8")

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def delayed_path(world: FaultWorld, namespace: Namespace, path: str) -> Iterator[DelayedPath]:
    """The relay for ``path`` (the aggregator's or the API server's), closed after the trial."""
    service = urlsplit(world.aggregator.url if path == "aggregator" else world.kube.url)
    relay = DelayedPath(namespace, f"{service.hostname}:{service.port}", world.root / f"delay-{path}")
    try:
        yield relay
    finally:
        relay.close()


@dataclass(frozen=True)
class Cut:
    """The fault on one path: ``drop`` and ``slow`` on its veth link, ``delay`` in its relay."""

    path: str
    fault: str
    link: Link
    relay: DelayedPath | None
    delay_ms: float
    hold_s: float

    def on(self) -> None:
        if self.fault == "drop":
            self.link.drop()
        elif self.fault == "slow":
            self.link.shape("16kbit")  # a 2 kB report takes a second, a permit round trip several
        else:
            assert self.relay is not None
            self.relay.delay(self.delay_ms)

    def off(self) -> None:
        if self.relay is not None:
            self.relay.delay(0)
        else:
            self.link.heal()

    def __str__(self) -> str:
        return f"delay {self.delay_ms:.0f} ms each way" if self.fault == "delay" else self.fault


def partition_once(world: FaultWorld, namespace: Namespace, run: Trials, path: str, fault: str) -> None:
    to_aggregator, to_api = namespace.links
    world.aggregator.start()
    world.start_jobset()
    bad = str(world.running()[0]["spec"]["nodeName"])
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(delayed_path(world, namespace, path)) if fault == "delay" else None
        if relay is not None and path == "aggregator":
            world.start_agents([bad], netns=namespace.name, aggregator_url=relay.url)
        elif relay is not None:
            kubeconfig = write_kubeconfig(world.root / "kubeconfig-delayed", relay.url)
            world.start_agents([bad], netns=namespace.name, kubeconfig=kubeconfig)
        else:
            world.start_agents([bad], netns=namespace.name)
        world.start_agents([n for n in world.names if n != bad])
        wanted = run.moment(MOMENTS)
        hold_s = run.rng.uniform(2.0, 6.0)
        link = to_aggregator if path == "aggregator" else to_api
        cut = Cut(path, fault, link, relay, delay_ms=run.rng.uniform(*DELAYS_MS), hold_s=hold_s)
        hold(world, run, bad, cut, wanted)


def hold(world: FaultWorld, run: Trials, bad: str, cut: Cut, wanted: str) -> None:
    """Inject ``cut`` at moment ``wanted`` for its hold time, heal it, and record the trial."""
    if wanted == "before-taint":
        cut.on()
        world.break_node(bad)
        moment = wanted
    else:
        world.break_node(bad)
        moment = world.reach(bad, wanted)
        cut.on()
    time.sleep(cut.hold_s)
    during = {
        "tainted": world.recorder.tainted(bad),
        "drain": world.drain_phase(bad),
        "evicted": world.evicted(bad),
        "incident_known": world.incident_known(bad),
    }
    if wanted == "before-taint" and cut.path == "aggregator" and cut.fault == "drop":
        # the safety rule: marked and tainted without the aggregator, never drained without a permit
        assert during["tainted"], f"seed {run.seed}: no taint while the aggregator was cut off"
        assert during["drain"] is None and not during["evicted"], f"seed {run.seed}: drained without a permit"
    cut.off()
    run.record(
        world,
        moment=f"{moment}, {cut} {cut.hold_s:.1f} s",
        healed_at=world.recorder.now(),
        within_s=STEADY_WITHIN_S,
        during=during,
    )


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["drop", "slow", "delay"])
@pytest.mark.parametrize("trial", range(trials(1)))
def test_partition_between_an_agent_and_the_aggregator(
    netns_pair: Namespace, make_world: MakeWorld, trials_of: Callable[[str], Trials], fault: str, trial: int
) -> None:
    to_aggregator, to_api = netns_pair.links
    world = make_world(aggregator_host=to_aggregator.host_ip, api_host=to_api.host_ip)
    partition_once(world, netns_pair, trials_of(f"partition-aggregator-{fault}"), "aggregator", fault)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["drop", "slow", "delay"])
@pytest.mark.parametrize("trial", range(trials(1)))
def test_partition_between_an_agent_and_the_api_server(
    netns_pair: Namespace, make_world: MakeWorld, trials_of: Callable[[str], Trials], fault: str, trial: int
) -> None:
    to_aggregator, to_api = netns_pair.links
    world = make_world(aggregator_host=to_aggregator.host_ip, api_host=to_api.host_ip)
    partition_once(world, netns_pair, trials_of(f"partition-api-{fault}"), "api", fault)
