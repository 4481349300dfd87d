"""ChecksConfig: documented defaults, typed parsing from YAML, and one-line errors naming the bad field."""

from __future__ import annotations

import json

import pydantic
import pytest
import yaml

from checks.config import ChecksConfig, ConfigError
from core.findings import Action


def test_from_mapping_of_nothing_is_the_default() -> None:
    assert ChecksConfig.from_mapping(None) == ChecksConfig()
    assert ChecksConfig.from_mapping({}) == ChecksConfig()


def test_a_family_left_empty_in_yaml_keeps_its_defaults() -> None:
    assert ChecksConfig.from_mapping(yaml.safe_load("xid:\necc:\n")) == ChecksConfig()


def test_defaults_that_the_docs_promise() -> None:
    config = ChecksConfig()
    assert config.xid.unknown_action is Action.REPLACE
    assert config.xid.overrides == {}
    assert config.row_remap.uncorrectable_replace_threshold == 512
    assert config.retired_pages.total_replace_threshold == 60
    assert config.pcie.width_degraded_action is Action.NONE
    assert config.persistence.enabled is False
    assert config.nvlink.down_action is Action.RESET_GPU


def test_yaml_overrides_parse_to_typed_values() -> None:
    text = """
xid:
  overrides:
    79: reboot
    109: restart_app
ecc:
  warn_when_disabled: false
"""
    config = ChecksConfig.from_mapping(yaml.safe_load(text))
    assert config.xid.overrides == {79: Action.REBOOT, 109: Action.RESTART_APP}
    assert config.ecc.warn_when_disabled is False


def test_json_string_keys_for_xid_overrides_are_accepted() -> None:
    config = ChecksConfig.from_mapping(json.loads('{"xid": {"overrides": {"109": "none"}}}'))
    assert config.xid.overrides == {109: Action.NONE}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"xid": {"overides": {79: "reboot"}}}, "xid.overides"),
        ({"xdi": {}}, "xdi"),
        ({"xid": {"overrides": {79: "drain"}}}, "xid.overrides.79"),
        ({"row_remap": {"uncorrectable_warn_threshold": "lots"}}, "row_remap.uncorrectable_warn_threshold"),
        ({"nvlink": {"crc_warn_threshold": 0}}, "nvlink.crc_warn_threshold"),
        ({"pcie": {"enabled": "maybe"}}, "pcie.enabled"),
    ],
)
def test_bad_input_raises_config_error_naming_the_field_in_one_line(
    data: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ChecksConfig.from_mapping(data)
    message = str(caught.value)
    assert message.startswith(f"checks config: {field}: ")
    assert "\n" not in message


def test_several_errors_are_counted_in_the_one_line() -> None:
    with pytest.raises(ConfigError, match=r"\(and 1 more\)$"):
        ChecksConfig.from_mapping({"xdi": {}, "ecc": {"enabled": "maybe"}})


def test_a_non_mapping_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected a mapping, got list"):
        ChecksConfig.from_mapping([1, 2])  # type: ignore[arg-type]


def test_config_is_frozen() -> None:
    config = ChecksConfig()
    with pytest.raises(pydantic.ValidationError):
        config.xid.enabled = False  # type: ignore[misc]


def test_every_setting_has_a_default_and_a_description() -> None:
    for section_name, section_field in ChecksConfig.model_fields.items():
        assert section_field.description, section_name
        section_type = type(getattr(ChecksConfig(), section_name))
        for name, field in section_type.model_fields.items():
            assert field.description, f"{section_name}.{name}"
            assert not field.is_required(), f"{section_name}.{name}"
        assert "enabled" in section_type.model_fields, section_name
