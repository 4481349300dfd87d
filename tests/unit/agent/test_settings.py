"""Agent settings: one typed object from a YAML file plus GPUHEALTH_* variables, and its generated reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_paths import DOCS

from agent.settings import AgentSettings, load_settings
from agent.settings_doc import main, render, settings_table
from core.docblocks import DocError
from core.settings import SettingsError

DOC = DOCS / "agent.md"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start from an environment with none of our variables (the CI runner may set NODE_NAME)."""
    import os

    for name in list(os.environ):
        if name.startswith("GPUHEALTH_") or name == "NODE_NAME":
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file_match_the_documented_safe_defaults() -> None:
    settings = load_settings(None)
    assert settings.interval_s == 10.0
    assert settings.state_dir == Path("/var/lib/gpuhealth")
    assert settings.dry_run is False
    assert (settings.http.host, settings.http.port, settings.http.enabled) == ("0.0.0.0", 9477, True)
    assert settings.kernel_log.enabled is False
    assert settings.kubernetes.kubeconfig is None


def test_node_name_comes_from_NODE_NAME_set_by_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-07")
    assert load_settings(None).node_name == "gpu-node-07"


def test_the_yaml_file_sets_nested_sections(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "node_name: n1\ninterval_s: 2.5\ndebounce:\n  polled_bad_readings: 5\n"
        "kubernetes:\n  resync_s: 60\n  retry:\n    attempts: 2\nkernel_log:\n  enabled: true\n  source: journal\n",
    )
    settings = load_settings(path)
    assert settings.node_name == "n1"
    assert settings.interval_s == 2.5
    assert settings.debounce.polled_bad_readings == 5
    assert settings.kubernetes.resync_s == 60
    assert settings.kubernetes.retry.attempts == 2
    assert settings.kernel_log.source == "journal"


def test_environment_wins_over_the_file_for_flat_and_nested_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "interval_s: 30\nhttp:\n  port: 1234\n  host: 127.0.0.1\n")
    monkeypatch.setenv("GPUHEALTH_INTERVAL_S", "5")
    monkeypatch.setenv("GPUHEALTH_HTTP__PORT", "9999")
    settings = load_settings(path)
    assert settings.interval_s == 5
    assert settings.http.port == 9999
    assert settings.http.host == "127.0.0.1"  # the file's value for the key the environment did not set


def test_an_unknown_key_is_one_line_naming_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "intervall_s: 3\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    assert "intervall_s" in message


def test_a_bad_nested_value_names_its_dotted_path(tmp_path: Path) -> None:
    path = write(tmp_path, "http:\n  port: 70000\n")
    with pytest.raises(SettingsError, match=r"http\.port: .*65535"):
        load_settings(path)


def test_a_bad_environment_value_is_reported_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_INTERVAL_S", "soon")
    with pytest.raises(SettingsError, match="environment: interval_s"):
        load_settings(None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a: [1,\n", "not valid YAML"), ("- 1\n- 2\n", "top level must be a mapping")],
)
def test_a_malformed_file_is_one_clear_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(SettingsError, match=expected):
        load_settings(write(tmp_path, text))


def test_a_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")


def test_every_field_has_a_description() -> None:
    def undocumented(model: type) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if not field.description:
                missing.append(name)
        return missing

    assert undocumented(AgentSettings) == []


def test_docs_agent_md_reference_is_generated_from_the_current_model() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert render(text) == text, "run: python -m agent.settings_doc"


def test_the_reference_names_every_leaf_key_with_its_environment_variable() -> None:
    table = settings_table()
    for key, env in [
        ("interval_s", "GPUHEALTH_INTERVAL_S"),
        ("kubernetes.retry.attempts", "GPUHEALTH_KUBERNETES__RETRY__ATTEMPTS"),
        ("policy.taint", "GPUHEALTH_POLICY__TAINT"),
        ("debounce.min_dwell_s", "GPUHEALTH_DEBOUNCE__MIN_DWELL_S"),
        ("http.port", "GPUHEALTH_HTTP__PORT"),
    ]:
        assert f"| `{key}` | `{env}` |" in table


def test_check_mode_reports_a_stale_reference(tmp_path: Path) -> None:
    stale = tmp_path / "agent.md"
    stale.write_text(DOC.read_text(encoding="utf-8").replace("`interval_s`", "`interval`"), encoding="utf-8")
    assert main([str(stale), "--check"]) == 1
    assert main([str(stale)]) == 0
    assert main([str(stale), "--check"]) == 0


def test_a_document_without_markers_is_an_error() -> None:
    with pytest.raises(DocError, match="agent-settings"):
        render("# no markers\n")
