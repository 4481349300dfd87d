"""Behaviour profiles: chosen per node group, one place for per-node values, bad ones refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.settings import load_settings, with_profile
from checks.config import ChecksConfig
from core.debounce import DebounceConfig
from core.findings import Action
from core.settings import SettingsError
from remediation.plan.planner import RemediationPolicy
from remediation.plan.profiles import (
    PROFILE_LABEL,
    NodeGroup,
    ProfilesSettings,
    budget_share,
    resolve,
    select,
)

TWO_GROUPS = {
    "definitions": {
        "canary": {"mode": "drain", "match": {"labels": {"pool": "canary"}}, "budget_share_percent": 20},
        "main": {
            "mode": "mark",
            "match": {"labels": {"pool": "main"}},
            "xid_actions": {79: "reset_gpu"},
            "debounce": {"polled_bad_readings": 5},
        },
    }
}


def _resolve(profiles: ProfilesSettings, name: str | None):  # type: ignore[no-untyped-def]
    return resolve(
        profiles, name, checks=ChecksConfig(), debounce=DebounceConfig(), policy=RemediationPolicy()
    )


def test_each_mode_climbs_the_ladder_of_writes() -> None:
    """observe writes nothing; mark marks; quarantine taints and cordons; drain and remediate drain."""
    modes = ["observe", "mark", "quarantine", "drain", "remediate"]
    profiles = ProfilesSettings(definitions={m: {"mode": m, "match": {"labels": {"mode": m}}} for m in modes})
    seen = {m: _resolve(profiles, m) for m in modes}
    assert [(p.policy.mark, p.policy.taint, p.policy.cordon, p.policy.drain) for p in seen.values()] == [
        (False, False, False, False),
        (True, False, False, False),
        (True, True, True, False),
        (True, True, True, True),
        (True, True, True, True),
    ]
    assert [p.recovery for p in seen.values()] == [False, False, False, False, True]


def test_a_node_gets_the_profile_its_labels_or_nomad_pool_select() -> None:
    profiles = ProfilesSettings.model_validate(
        {
            "definitions": {
                **TWO_GROUPS["definitions"],
                "nomad-a100": {"mode": "quarantine", "match": {"node_pool": "a100", "node_class": "gpu"}},
            }
        }
    )
    assert select(profiles, NodeGroup(labels={"pool": "canary", "zone": "a"})) == "canary"
    assert select(profiles, NodeGroup(labels={"pool": "main"})) == "main"
    assert select(profiles, NodeGroup(node_pool="a100", node_class="gpu")) == "nomad-a100"
    assert select(profiles, NodeGroup(node_pool="a100")) is None  # class missing: not that profile
    assert budget_share(profiles, "canary") == 20
    assert budget_share(profiles, None) is None


def test_overrides_reach_the_checks_debounce_and_policy_over_the_base() -> None:
    profiles = ProfilesSettings.model_validate(TWO_GROUPS)
    main = _resolve(profiles, "main")
    assert main.checks.xid.overrides == {79: Action.RESET_GPU}
    assert main.debounce.polled_bad_readings == 5
    assert main.debounce.clean_readings_to_recover == DebounceConfig().clean_readings_to_recover
    assert not main.policy.taint


def test_two_profiles_that_can_select_the_same_node_are_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match="profiles 'a' and 'b' can select the same node") as caught:
        ProfilesSettings.model_validate(
            {
                "definitions": {
                    "a": {"mode": "mark", "match": {"labels": {"zone": "x"}}},
                    "b": {"mode": "drain", "match": {"labels": {"gpu": "h100"}}},
                }
            }
        )
    assert "\n" not in str(caught.value).split("\n  ")[-1].strip()


def _settings_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (
            "mode: drain\n      match: {labels: {a: b}}\n      debounce: {polled_bad_reading: 2}",
            "profiles.definitions.p.debounce.polled_bad_reading: Extra inputs are not permitted",
        ),
        (
            "mode: drain\n      match: {labels: {a: b}}\n      checks: {xid: {overide: {}}}",
            "profiles.definitions.p.checks.xid.overide: Extra inputs are not permitted",
        ),
        ("mode: drain\n      match: {labels: {a: b}}\n      budget: 3", "budget"),
        ("mode: hover\n      match: {labels: {a: b}}", "mode"),
    ],
)
def test_a_profile_naming_an_unknown_field_is_refused_at_load_in_one_line(
    tmp_path: Path, profile: str, expected: str
) -> None:
    path = _settings_file(tmp_path, f"node_name: n1\nprofiles:\n  definitions:\n    p:\n      {profile}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_the_agent_runs_with_its_profile_and_reports_its_name(tmp_path: Path) -> None:
    path = _settings_file(
        tmp_path,
        "node_name: n1\npolicy: {cordon: true}\nprofiles:\n  definitions:\n"
        "    canary: {mode: drain, match: {labels: {pool: canary}}, shadow: true}\n"
        "    main: {mode: observe, match: {labels: {pool: main}}}\n",
    )
    settings = load_settings(path)
    canary, profile = with_profile(settings, NodeGroup(labels={"pool": "canary"}))
    assert canary.policy.drain and canary.policy.cordon
    assert profile.shadow and not profile.acting_policy.taint  # shadow writes nothing by default
    assert canary.aggregator.labels[PROFILE_LABEL] == "canary"
    main, _ = with_profile(settings, NodeGroup(labels={"pool": "main"}))
    assert not main.policy.mark and not main.policy.drain
    other, chosen = with_profile(settings, NodeGroup(labels={"pool": "x"}))
    assert chosen.name == "default" and other.policy == settings.policy
    assert other.aggregator.labels[PROFILE_LABEL] == "default"
