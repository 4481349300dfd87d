"""The executor's node watch renews at random between watch_timeout_s and twice that, as client-go's
reflector does, so that a fleet of agents started together does not renew its watches in one wave."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from remediation.kubernetes.node_watch import NodeWatch


def test_each_watch_lasts_between_the_timeout_and_twice_it_and_they_differ() -> None:
    api: Any = SimpleNamespace(node_name="gpu-node-0")
    watch = NodeWatch(api, watch_timeout_s=300)
    timeouts = [watch._next_timeout_s() for _ in range(500)]
    assert all(300 <= timeout <= 600 for timeout in timeouts)
    assert len(set(timeouts)) > 100  # spread over the range, not one value
    assert min(timeouts) < 350 and max(timeouts) > 550
