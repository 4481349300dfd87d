"""The published JSON Schemas (docs/schemas/) are generated from the models and must not drift."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from repo_paths import FIXTURES

from gpuhealth.schemas import SCHEMA_DIR, generated_schemas, render

SNAPSHOTS = sorted((FIXTURES / "snapshots").glob("*.json"))


@pytest.mark.parametrize("name", sorted(generated_schemas()))
def test_committed_schema_matches_the_models(name: str) -> None:
    """Regenerate with `python -m gpuhealth.schemas --write` after a deliberate model change."""
    committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert committed == render(generated_schemas()[name]), f"docs/schemas/{name} is stale"


@pytest.mark.parametrize("path", SNAPSHOTS, ids=[p.name for p in SNAPSHOTS])
def test_every_fixture_snapshot_validates_against_the_published_schema(path: Path) -> None:
    schema = json.loads((SCHEMA_DIR / "snapshot-v1.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(path.read_text()))


def test_the_published_snapshot_schema_requires_exactly_the_contract_fields() -> None:
    schema = generated_schemas()["snapshot-v1.schema.json"]
    assert schema["required"] == ["schema", "node", "gpus"]
    assert schema["$defs"]["GpuSnapshot"]["required"] == ["index", "uuid"]


def test_the_published_verdict_schema_names_every_status_and_action_in_order() -> None:
    defs = generated_schemas()["verdict.schema.json"]["$defs"]
    assert defs["Status"]["enum"] == ["ok", "unknown", "warn", "fail"]
    assert defs["Action"]["enum"] == [
        "none",
        "restart_app",
        "reset_gpu",
        "drain_and_reset",
        "reboot",
        "replace",
    ]
    assert set(defs["Finding"]["required"]) == {"check", "gpu", "status", "code", "message", "action"}
