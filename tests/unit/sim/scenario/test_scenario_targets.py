"""Scenario targets: each injection and each expectation resolves its own target, hit nodes left out."""

from __future__ import annotations

import pytest

from sim.scenario.loader import load_scenario, parse_scenario, shipped_scenarios
from sim.scenario.model import NodeStateExpectation, Role, Scenario
from sim.scenario.orchestrator import NodeView
from sim.scenario.targets import TargetError, TargetResolver, check_playable

HEAD = "schema: gpuhealth.scenario/v1\nname: t\nfleet: {nodes: 6}\n"


class FixedRoles:
    """The part of an orchestrator a resolver reads: which nodes hold each role (sorted by name)."""

    def __init__(self, roles: dict[str, list[str]]) -> None:
        self.roles = roles

    def role_nodes(self, role: Role) -> list[str]:
        return list(self.roles.get(role, []))

    def node(self, name: str) -> NodeView:
        raise AssertionError("a resolver reads roles only")


def scenario(body: str) -> Scenario:
    return parse_scenario(HEAD + body, "t.yaml")


def play(resolver: TargetResolver, story: Scenario) -> dict[str, tuple[str, ...]]:
    """Resolve and record each injection in timeline order, as the engine does at each first play."""
    for injection in story.timeline:
        assert injection.target is not None
        resolver.record_hit(injection.label(), resolver.resolve(injection.target, injection))
    return resolver.hit


IDLE = {"idle": ["n1", "n2", "n3", "n4"], "training": ["n5", "n6"]}


def test_two_injections_with_the_same_role_target_hit_two_different_nodes() -> None:
    """Two `{role: idle}` lines are two faults: the second leaves out the node the first one hit."""
    story = scenario(
        "timeline:\n"
        "- {at: 1s, name: a, target: {role: idle}, fault: {kind: xid, xid: 79}}\n"
        "- {at: 2s, name: b, target: {role: idle}, fault: {kind: xid, xid: 79}}\n"
    )
    hit = play(TargetResolver(FixedRoles(IDLE), 6), story)  # type: ignore[arg-type]
    assert hit == {"a": ("n1",), "b": ("n2",)}


def test_identical_unnamed_lines_are_still_two_injections() -> None:
    """Not even the same value twice (no name, same time, same fault) shares one resolution."""
    story = scenario(
        "timeline:\n"
        "- {at: 1s, target: {role: idle}, fault: {kind: xid, xid: 79}}\n"
        "- {at: 1s, target: {role: idle}, fault: {kind: xid, xid: 79}}\n"
    )
    resolver = TargetResolver(FixedRoles(IDLE), 6)  # type: ignore[arg-type]
    first, second = story.timeline
    assert first.target is not None and second.target is not None
    resolver.record_hit(first.label(), resolver.resolve(first.target, first))
    assert resolver.resolve(second.target, second) == ("n2",)


def test_index_counts_among_the_role_nodes_not_hit_yet() -> None:
    """docs/scenarios.md: nodes already hit are left out, then `index` and `count` pick from those left."""
    story = scenario(
        "timeline:\n"
        "- {at: 1s, name: a, target: {role: idle, index: 0}, fault: {kind: xid, xid: 79}}\n"
        "- {at: 2s, name: b, target: {role: idle, index: 1}, fault: {kind: xid, xid: 79}}\n"
        "- {at: 3s, name: c, target: {role: idle, index: 0, count: 2}, fault: {kind: xid, xid: 79}}\n"
    )
    hit = play(TargetResolver(FixedRoles(IDLE), 6), story)  # type: ignore[arg-type]
    # a: n1; left n2 n3 n4, index 1 -> n3; left n2 n4, index 0 count 2 -> n2 n4
    assert hit == {"a": ("n1",), "b": ("n3",), "c": ("n2", "n4")}


def test_an_injection_keeps_its_nodes_on_every_play_and_repair() -> None:
    """A repeated (flapping) injection hits the same node each time, though that node is now 'hit'."""
    story = scenario(
        "timeline:\n"
        "- {at: 1s, name: a, target: {role: idle}, fault: {kind: throttle, reasons: [sw_thermal]},"
        " clear_after: 0.5s, repeat: {every: 2s, times: 3}}\n"
    )
    resolver = TargetResolver(FixedRoles(IDLE), 6)  # type: ignore[arg-type]
    (injection,) = story.timeline
    assert injection.target is not None
    plays = []
    for _ in range(3):
        nodes = resolver.resolve(injection.target, injection)
        resolver.record_hit(injection.label(), nodes)
        plays.append(nodes)
    assert plays == [("n1",), ("n1",), ("n1",)]


def test_an_expectation_with_a_role_target_resolves_its_own_nodes() -> None:
    """An expectation about `{role: idle}` looked at after an injection on `{role: idle}` means an idle
    node no injection hit (the untouched rest of the fleet), not the injection's node."""
    story = scenario(
        "timeline:\n"
        "- {at: 1s, name: a, target: {role: idle}, fault: {kind: xid, xid: 79}}\n"
        "expectations:\n"
        "- {name: others stay healthy, kind: node_state, target: {role: idle}, states: [healthy],"
        " during: {start: 0s, end: 5s}}\n"
    )
    resolver = TargetResolver(FixedRoles(IDLE), 6)  # type: ignore[arg-type]
    play(resolver, story)
    (expectation,) = story.expectations
    assert isinstance(expectation, NodeStateExpectation) and expectation.target is not None
    assert resolver.resolve(expectation.target, expectation) == ("n2",)


# --- a scenario its fleet cannot play is refused before anything starts --------------------------------


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "timeline:\n- {at: 1s, name: b, target: {role: idle, count: 7}, fault: {kind: xid, xid: 79}}\n",
            "injection b: 7 idle nodes #0, but at most 6 idle node(s) in this fleet",
        ),
        (
            "workloads: {training: {nodes: 4}}\n"
            "timeline:\n- {at: 1s, name: b, target: {role: idle, count: 3}, fault: {kind: xid, xid: 79}}\n",
            "injection b: 3 idle nodes #0, but at most 2 idle node(s) in this fleet",
        ),
        (
            "timeline:\n- {at: 1s, name: b, target: {role: training}, fault: {kind: xid, xid: 79}}\n",
            "injection b: training node #0, but at most 0 training node(s) in this fleet",
        ),
        (
            "timeline:\n"
            "- {at: 1s, name: a, target: {role: idle, count: 4}, fault: {kind: xid, xid: 79}}\n"
            "- {at: 2s, name: b, target: {role: idle, count: 3}, fault: {kind: xid, xid: 79}}\n",
            "injection b: 3 idle nodes #0 after 4 node(s) already hit: the fleet has 6",
        ),
        (
            "timeline:\n- {at: 1s, name: b, target: {role: idle}, gpu: 8, fault: {kind: xid, xid: 79}}\n",
            "injection b: GPU 8, but a node has 8 GPU(s)",
        ),
        (
            "workloads: {training: {nodes: 7}}\n",
            "workloads: need 7 nodes (7 training, at least 0 inference), the fleet has 6",
        ),
        (
            "workloads: {inference: {replicas: 1, gpus: 9}}\n",
            "workloads: an inference pod asks for 9 GPUs, a node has 8",
        ),
        (
            "expectations:\n- {name: e, kind: taint, target: {role: inference, count: 2}, by: 1s}\n",
            "expectation 'e': 2 inference nodes #0, but at most 0 inference node(s) in this fleet",
        ),
        (
            "timeline:\n"
            "- {at: 1s, name: b, target: {injection: a}, fault: {kind: clear}}\n"
            "- {at: 2s, name: a, target: {role: idle}, fault: {kind: xid, xid: 79}}\n",
            "injection b: targets the nodes of a, which has not played by then",
        ),
    ],
    ids=[
        "more-than-fleet",
        "idle-beside-training",
        "no-training-job",
        "hits-add-up",
        "gpu-out-of-range",
        "training-too-big",
        "inference-pod-too-big",
        "expectation-role",
        "injection-played-later",
    ],
)
def test_a_scenario_the_fleet_cannot_play_is_refused_with_the_reason(body: str, problem: str) -> None:
    with pytest.raises(TargetError) as caught:
        check_playable(scenario(body))
    assert str(caught.value) == problem


def test_a_node_target_outside_a_resized_fleet_is_refused() -> None:
    """`--nodes` renames the fleet (gpu-node-5 becomes gpu-node-05 at 12 nodes, is gone at 4)."""
    story = scenario(
        "timeline:\n- {at: 1s, name: b, target: {node: gpu-node-5}, fault: {kind: xid, xid: 79}}\n"
    )
    check_playable(story)
    with pytest.raises(TargetError, match="injection b: no node named gpu-node-5 in a fleet of 4"):
        check_playable(story.resized(4))


@pytest.mark.parametrize("nodes", [None, 16, 200, 1000])
def test_every_shipped_scenario_is_playable_at_its_sizes(nodes: int | None) -> None:
    for name, path in shipped_scenarios().items():
        story = load_scenario(path)
        try:
            check_playable(story if nodes is None else story.resized(nodes))
        except TargetError as exc:
            pytest.fail(f"{name}: {exc}")
