"""Scenario targets -> node names, resolved when first used and then kept (a role's nodes change as the
workloads move; an expectation about "the node XID 79 hit" must keep meaning that node)."""

from __future__ import annotations

import math

from sim.scenario.model import Expectation, Injection, Target, node_name
from sim.scenario.orchestrator import Orchestrator

# Who uses a target. Each injection and each expectation resolves its own: two injections written alike
# (two ``{role: idle}``) are two different faults, and the second must not land on the first one's node.
TargetOwner = Injection | Expectation


class TargetError(ValueError):
    """A target that names no node (unknown name, not enough nodes in the role)."""


class TargetResolver:
    def __init__(self, orchestrator: Orchestrator, fleet_size: int) -> None:
        self._orchestrator = orchestrator
        self._fleet_size = fleet_size
        self._names = {node_name(i, fleet_size) for i in range(fleet_size)}
        # Keyed by the owner's identity, not its value (frozen models compare and hash by value, so two
        # identical lines of a timeline would share a cache entry); the owner is kept so its id stays its.
        self._resolved: dict[int, tuple[TargetOwner, tuple[str, ...]]] = {}
        self.hit: dict[str, tuple[str, ...]] = {}  # injection name -> the nodes it hit
        self._touched: set[str] = set()  # nodes any injection hit: never "idle" again

    def resolve(self, target: Target, owner: TargetOwner) -> tuple[str, ...]:
        """The nodes ``target`` names for ``owner``: looked up at its first use, the same ones after."""
        kept = self._resolved.get(id(owner))
        if kept is None:
            kept = (owner, self._lookup(target))
            self._resolved[id(owner)] = kept
        return kept[1]

    def record_hit(self, injection: str, nodes: tuple[str, ...]) -> None:
        self.hit.setdefault(injection, nodes)
        self._touched.update(nodes)

    def wanted(self, target: Target) -> int:
        """How many nodes a role target takes: ``count``, or the ``fraction`` of the fleet when larger."""
        return wanted_nodes(target, self._fleet_size)

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
        # Nodes an injection already hit are left out first; ``index`` then counts among those left.
        candidates = [n for n in self._orchestrator.role_nodes(target.role) if n not in self._touched]
        wanted = self.wanted(target)
        chosen = candidates[target.index : target.index + wanted]
        if len(chosen) < wanted:
            raise TargetError(
                f"{target.describe()}: only {len(candidates)} {target.role} node(s) left to pick from"
            )
        return tuple(chosen)


def wanted_nodes(target: Target, fleet_size: int) -> int:
    """How many nodes a role target takes in a fleet of ``fleet_size``."""
    if target.fraction is None:
        return target.count
    return max(target.count, math.ceil(target.fraction * fleet_size))
