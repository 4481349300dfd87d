"""Scenario targets -> node names, resolved when first used and then kept (a role's nodes change as the
workloads move; an expectation about "the node XID 79 hit" must keep meaning that node)."""

from __future__ import annotations

import math

from sim.scenario.model import Expectation, Injection, Role, Scenario, Target, node_name
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


def check_playable(scenario: Scenario) -> None:
    """Refuse, before anything starts, a scenario its fleet cannot play; raises TargetError naming why.

    Only what is certain from the file and the fleet size: workloads that cannot all be placed, a GPU or a
    node the fleet does not have, and role targets asking for more nodes than the role can ever hold. Nodes
    an injection hit are left out of every later role target, so the injections' role targets, in the
    order they first play, must also fit in the fleet together. A role's nodes still move while the story
    plays (the job restarts elsewhere), so a target can still come up short then; the engine reports that
    the same way, only later.
    """
    fleet = scenario.fleet
    _check_workloads_fit(scenario)
    names = {node_name(i, fleet.nodes) for i in range(fleet.nodes)}
    touched = 0  # nodes the injections' role targets took so far: distinct, since hit nodes are left out
    played: set[str] = set()  # names of the injections played so far
    first_plays = sorted(enumerate(scenario.timeline), key=lambda pair: (pair[1].at, pair[0]))
    for _, injection in first_plays:
        if injection.name is not None:
            played.add(injection.name)
        if injection.target is None:  # a fleet fault
            continue
        where = f"injection {injection.label()}"
        earlier = injection.target.injection
        if earlier is not None and earlier not in played:
            raise TargetError(f"{where}: targets the nodes of {earlier}, which has not played by then")
        if injection.gpu >= fleet.gpus_per_node:
            raise TargetError(f"{where}: GPU {injection.gpu}, but a node has {fleet.gpus_per_node} GPU(s)")
        _check_target(injection.target, where, scenario, names)
        if injection.target.role is not None:
            need = injection.target.index + wanted_nodes(injection.target, fleet.nodes)
            if touched + need > fleet.nodes:
                raise TargetError(
                    f"{where}: {injection.target.describe()} after {touched} node(s) already hit: "
                    f"the fleet has {fleet.nodes}"
                )
            touched += wanted_nodes(injection.target, fleet.nodes)
    for expectation in scenario.expectations:
        target = getattr(expectation, "target", None)
        if isinstance(target, Target):
            _check_target(target, f"expectation {expectation.name!r}", scenario, names)


def _check_workloads_fit(scenario: Scenario) -> None:
    fleet, workloads = scenario.fleet, scenario.workloads
    training_nodes = workloads.training.nodes if workloads.training else 0
    inference_nodes = 0
    if workloads.inference is not None:
        if workloads.inference.gpus > fleet.gpus_per_node:
            raise TargetError(
                f"workloads: an inference pod asks for {workloads.inference.gpus} GPUs, "
                f"a node has {fleet.gpus_per_node}"
            )
        # A training pod takes every GPU of its node, so inference packs onto the other nodes.
        per_node = fleet.gpus_per_node // workloads.inference.gpus
        inference_nodes = math.ceil(workloads.inference.replicas / per_node)
    if training_nodes + inference_nodes > fleet.nodes:
        raise TargetError(
            f"workloads: need {training_nodes + inference_nodes} nodes ({training_nodes} training, "
            f"at least {inference_nodes} inference), the fleet has {fleet.nodes}"
        )


def _check_target(target: Target, where: str, scenario: Scenario, names: set[str]) -> None:
    if target.node is not None and target.node not in names:
        raise TargetError(f"{where}: no node named {target.node} in a fleet of {scenario.fleet.nodes}")
    if target.role is None:
        return
    most = _most_role_nodes(target.role, scenario)
    need = target.index + wanted_nodes(target, scenario.fleet.nodes)
    if need > most:
        raise TargetError(
            f"{where}: {target.describe()}, but at most {most} {target.role} node(s) in this fleet"
        )


def _most_role_nodes(role: Role, scenario: Scenario) -> int:
    """The most nodes ``role`` can hold: the training job's nodes, one per inference pod, or the nodes
    the training job leaves free."""
    workloads = scenario.workloads
    training_nodes = workloads.training.nodes if workloads.training else 0
    if role == "training":
        return training_nodes
    if role == "inference":
        return min(workloads.inference.replicas, scenario.fleet.nodes) if workloads.inference else 0
    return scenario.fleet.nodes - training_nodes
