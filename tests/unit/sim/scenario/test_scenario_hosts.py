"""How a large fleet's agents are dealt out to host processes."""

from __future__ import annotations

import pytest

from sim.scenario.hosts import NODES_PER_HOST, host_count


@pytest.mark.parametrize(("nodes", "hosts"), [(1, 1), (64, 1), (500, 1), (501, 2), (1000, 2), (5000, 10)])
def test_one_host_per_500_agents_whatever_the_cores(nodes: int, hosts: int) -> None:
    """No host carries more than NODES_PER_HOST agents, even on two cores: at 2,500 agents a host's burst
    left thousands of threads runnable behind one interpreter lock and the host stopped answering."""
    assert host_count(nodes) == hosts
    assert -(-nodes // host_count(nodes)) <= NODES_PER_HOST
