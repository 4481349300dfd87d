"""How a large fleet's agents are dealt out to host processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import sim.scenario.hosts as hosts_module
from sim.scenario.hosts import NODES_PER_HOST, HostedFleet, host_count


@pytest.mark.parametrize(("nodes", "hosts"), [(1, 1), (64, 1), (500, 1), (501, 2), (1000, 2), (5000, 10)])
def test_one_host_per_500_agents_whatever_the_cores(nodes: int, hosts: int) -> None:
    """No host carries more than NODES_PER_HOST agents, even on two cores: at 2,500 agents a host's burst
    left thousands of threads runnable behind one interpreter lock and the host stopped answering."""
    assert host_count(nodes) == hosts
    assert -(-nodes // host_count(nodes)) <= NODES_PER_HOST


class _StuckHost:
    """A host process that never exits on its own (as a starved host of 500 agents can take minutes): each
    join lets its whole timeout pass on the shared clock."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.joined: list[float] = []
        self.killed = False

    def is_alive(self) -> bool:
        return not self.killed

    def join(self, timeout: float | None = None) -> None:
        self.joined.append(0.0 if timeout is None else timeout)
        self.clock[0] += timeout or 0.0

    def kill(self) -> None:
        self.killed = True


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[tuple[str, ...]] = []

    def send(self, message: tuple[str, ...]) -> None:
        self.sent.append(message)

    def close(self) -> None:
        pass


def test_stopping_hosts_waits_one_deadline_for_all_not_one_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host is told to stop first, then all share one wait: ten stuck hosts are killed after one
    STOP_TIMEOUT_S, not ten (the 5,000-node benchmark took a minute per host to stop)."""
    clock = [0.0]
    # Only the hosts module's clock: the process's own time.monotonic stays as it is.
    monkeypatch.setattr(hosts_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    processes = [_StuckHost(clock) for _ in range(10)]
    pipes = [_Pipe() for _ in range(10)]
    fleet = HostedFleet(list(zip(processes, pipes, strict=True)), {})  # type: ignore[arg-type]
    fleet.stop()
    assert all(pipe.sent == [("stop",)] for pipe in pipes)
    assert all(process.killed for process in processes)
    assert clock[0] <= hosts_module.STOP_TIMEOUT_S
    assert processes[0].joined[0] == hosts_module.STOP_TIMEOUT_S
    assert processes[-1].joined[0] == 0.0


def test_each_node_is_found_on_the_host_it_was_dealt_to() -> None:
    fleet = HostedFleet([], {"gpu-node-00000": 0, "gpu-node-00001": 1})
    assert fleet.host_of("gpu-node-00001") == 1
    with pytest.raises(KeyError):
        fleet.host_of("gpu-node-99999")
