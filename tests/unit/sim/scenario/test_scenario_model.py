"""Scenario format v1: durations, targets, fault kinds, expectations, and one-line errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.schemas import SCHEMA_DIR, generated_schemas, render
from sim.scenario.loader import ScenarioError, load_scenario, parse_scenario, shipped_scenarios
from sim.scenario.model import Scenario
from sim.scenario.timeline import expand

HEAD = "schema: gpuhealth.scenario/v1\nname: t\n"


def parse(body: str) -> Scenario:
    return parse_scenario(HEAD + body, "t.yaml")


def problem(body: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse(body)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("t.yaml: ")
    return message.removeprefix("t.yaml: ")


@pytest.mark.parametrize(
    ("written", "seconds"), [("5s", 5.0), ("250ms", 0.25), ("2m", 120.0), (3, 3.0), ("1.5", 1.5)]
)
def test_durations_take_a_unit_or_plain_seconds(written: object, seconds: float) -> None:
    scenario = parse(f"timeline:\n- {{at: {written}, target: {{role: idle}}, fault: {{kind: clear}}}}\n")
    assert scenario.timeline[0].at == seconds


def test_every_shipped_scenario_is_valid() -> None:
    for path in shipped_scenarios().values():
        assert load_scenario(path).timeline


def test_the_committed_json_schema_matches_the_model_and_accepts_a_duration_string() -> None:
    committed = (SCHEMA_DIR / "scenario.v1.json").read_text(encoding="utf-8")
    assert committed == render(generated_schemas()["scenario.v1.json"])
    assert "gpuhealth.scenario/v1" in json.loads(committed)["properties"]["schema"]["const"]


def test_a_fault_kind_that_is_unknown_names_the_kinds_there_are() -> None:
    message = problem("timeline:\n- {at: 1s, target: {role: idle}, fault: {kind: melt}}\n")
    assert message.startswith("timeline[0].fault: unknown kind 'melt'") and "'xid'" in message


def test_a_wrong_type_names_the_field_path_without_the_union_tag() -> None:
    assert problem("timeline:\n- {at: 1s, target: {role: idle}, fault: {kind: xid, xid: abc}}\n").startswith(
        "timeline[0].fault.xid: Input should be a valid integer"
    )


def test_gpu_faults_need_a_target_and_fleet_faults_refuse_one() -> None:
    assert "xid fault needs a target" in problem("timeline:\n- {at: 1s, fault: {kind: xid, xid: 79}}\n")
    assert "api_outage fault has no target" in problem(
        "timeline:\n- {at: 1s, target: {role: idle}, fault: {kind: api_outage, seconds: 2}}\n"
    )


def test_a_target_names_exactly_one_of_node_role_or_injection() -> None:
    assert "exactly one of node, role or injection" in problem(
        "timeline:\n- {at: 1s, target: {role: idle, node: gpu-node-01}, fault: {kind: clear}}\n"
    )


def test_an_expectation_about_an_unknown_injection_is_refused() -> None:
    assert "unknown injection 'nope'" in problem(
        "expectations:\n- {name: e, kind: taint, target: {injection: nope}, by: 2s}\n"
    )


def test_a_node_outside_the_fleet_is_refused() -> None:
    assert "not in a fleet of 4" in problem(
        "fleet: {nodes: 4}\ntimeline:\n- {at: 1s, target: {node: gpu-node-9}, fault: {kind: clear}}\n"
    )


def test_an_expectation_has_by_or_during_never_both() -> None:
    assert "exactly one of 'by' or 'during'" in problem(
        "expectations:\n- {name: e, kind: breaker, state: closed, by: 1s, during: {start: 0, end: 2}}\n"
    )
    assert "expectations[0]: unknown kind 'tainted'" in problem(
        "expectations:\n- {name: e, kind: tainted, by: 1s}\n"
    )


def test_repeat_and_clear_after_expand_into_plays_and_repairs_in_time_order() -> None:
    scenario = parse(
        "timeline:\n- {at: 1s, target: {role: idle}, fault: {kind: throttle, reasons: [sw_thermal]},"
        " clear_after: 0.5s, repeat: {every: 2s, times: 3}}\n"
    )
    actions = expand(scenario.timeline)
    assert [(a.at, a.repair) for a in actions] == [
        (1.0, False),
        (1.5, True),
        (3.0, False),
        (3.5, True),
        (5.0, False),
        (5.5, True),
    ]
    assert scenario.length_s == 5.5


def test_unknown_fields_are_errors_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "fleet: {nodez: 3}\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"s.yaml: fleet.nodez: Extra inputs are not permitted"):
        load_scenario(path)


def test_resized_changes_only_the_fleet_size() -> None:
    scenario = load_scenario(shipped_scenarios()["default"])
    bigger = scenario.resized(1000)
    assert bigger.fleet.nodes == 1000 and bigger.timeline == scenario.timeline
