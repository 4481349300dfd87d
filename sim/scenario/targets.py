"""Scenario targets -> node names, resolved when first used and then kept (a role's nodes change as the
workloads move; an expectation about "the node XID 79 hit" must keep meaning that node)."""

from __future__ import annotations

import math

from sim.scenario.model import Target, node_name
from sim.scenario.orchestrator import Orchestrator


class TargetError(ValueError):
    """A target that names no node (unknown name, not enough nodes in the role)."""


class TargetResolver:
    def __init__(self, orchestrator: Orchestrator, fleet_size: int) -> None:
        self._orchestrator = orchestrator
        self._fleet_size = fleet_size
        self._names = {node_name(i, fleet_size) for i in range(fleet_size)}
        self._resolved: dict[Target, tuple[str, ...]] = {}
        self.hit: dict[str, tuple[str, ...]] = {}  # injection name -> the nodes it hit
        self._touched: set[str] = set()  # nodes any injection hit: never "idle" again

    def resolve(self, target: Target) -> tuple[str, ...]:
        if target not in self._resolved:
            self._resolved[target] = self._lookup(target)
        return self._resolved[target]

    def record_hit(self, injection: str, nodes: tuple[str, ...]) -> None:
        self.hit.setdefault(injection, nodes)
        self._touched.update(nodes)

    def wanted(self, target: Target) -> int:
        """How many nodes a role target takes: ``count``, or the ``fraction`` of the fleet when larger."""
        if target.fraction is None:
            return target.count
        return max(target.count, math.ceil(target.fraction * self._fleet_size))

    def _lookup(self, target: Target) -> tuple[str, ...]:
        if target.node is not None:
            if target.node not in self._names:
                raise TargetError(f"no node named {target.node} in this fleet")
            return (target.node,)
        if target.injection is not None:
            if target.injection not in self.hit:
                raise TargetError(f"injection {target.injection} has not been played yet")
            return self.hit[target.injection]
        assert target.role is not None  # the model allows exactly one of the three
        candidates = [n for n in self._orchestrator.role_nodes(target.role) if n not in self._touched]
        wanted = self.wanted(target)
        chosen = candidates[target.index : target.index + wanted]
        if len(chosen) < wanted:
            raise TargetError(
                f"{target.describe()}: only {len(candidates)} {target.role} node(s) left to pick from"
            )
        return tuple(chosen)
