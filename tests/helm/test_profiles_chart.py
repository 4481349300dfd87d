"""The chart's behaviour profiles (docs/turning-on-safely.md): off by default; set, the same section reaches
the agents' config (where each node picks its profile) and the aggregator's (each profile's budget share),
and both load it as their settings do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.settings import load_settings
from tests.helm.conftest import Render, one
from tests.helm.test_aggregator_chart import aggregator_settings_of

PROFILES: dict[str, Any] = {
    "definitions": {
        "canary": {
            "mode": "drain",
            "match": {"labels": {"gpuhealth.io/group": "canary"}},
            "shadow": True,
            "shadow_writes": "quarantine",
            "budget_share_percent": 20,
        },
        "main": {
            "mode": "quarantine",
            "match": {"labels": {"gpuhealth.io/group": "main"}},
            "xid_actions": {79: "reboot"},
        },
    }
}


def test_no_profiles_by_default(render: Render) -> None:
    objects = render({})
    assert "profiles" not in yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])


def test_profiles_reach_the_agents_and_the_aggregator(render: Render, tmp_path: Path) -> None:
    objects = render({"profiles": PROFILES})
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap")["data"]["config.yaml"])
    settings = load_settings(path)
    assert sorted(settings.profiles.definitions) == ["canary", "main"]
    assert settings.profiles.definitions["canary"].shadow
    aggregator = aggregator_settings_of(objects, tmp_path)
    assert aggregator.profiles.definitions["canary"].budget_share_percent == 20


def test_a_profile_with_an_unknown_mode_is_refused_by_the_chart(render: Render) -> None:
    with pytest.raises(Exception, match="mode"):
        render({"profiles": {"definitions": {"x": {"mode": "hover", "match": {"labels": {"a": "b"}}}}}})
