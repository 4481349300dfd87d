"""JSON Schemas of the public formats, generated from the models.

``python -m gpuhealth.schemas --write`` regenerates ``docs/schemas/`` and the aggregator settings part of the
chart's ``values.schema.json``; ``--check`` exits 1 naming each committed file that drifted from the models
(CI runs it, and tests/contract/test_schemas.py checks the same), so a model change can never silently
change a public contract. Without a flag it prints the schemas.

Other distributions add their own formats as entry points of the group ``gpuhealth.schemas`` (name: the file
name in docs/schemas/, value: a function returning the schema): the simulator's scenario format is one, so
the product never imports the simulator.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from aggregator.settings import AggregatorSettings
from core.findings import Verdict
from core.snapshot import NodeSnapshot

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"
CHART_SCHEMA = Path(__file__).resolve().parent.parent / "helm" / "gpuhealth" / "values.schema.json"
# The chart writes these itself: where it listens, its database, its secrets (from mounted files), TLS,
# and the remediator (from the drain and requeue values, drain.by aggregator).
CHART_SET = (
    "host",
    "port",
    "database_url",
    "database_url_file",
    "token",
    "shared_token_file",
    "metrics_token",
    "metrics_token_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
    "allow_plain_http",
    "remediator",
    "profiles",  # from the chart's top-level profiles value, shared with the agents
)
_KEPT = (
    "type",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "enum",
    "description",
)


def generated_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema for every public format."""
    snapshot = NodeSnapshot.model_json_schema(by_alias=True, mode="validation")
    snapshot = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpuhealth.io/schemas/snapshot-v1.schema.json",
        **snapshot,
    }
    verdict = Verdict.model_json_schema(mode="serialization")
    verdict = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpuhealth.io/schemas/verdict.schema.json",
        **verdict,
    }
    schemas = {"snapshot-v1.schema.json": snapshot, "verdict.schema.json": verdict}
    for entry in entry_points(group="gpuhealth.schemas"):
        schemas[entry.name] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://gpuhealth.io/schemas/{entry.name}",
            **entry.load()(),
        }
    return schemas


def chart_settings_schema() -> dict[str, Any]:
    """``aggregator.settings`` of the chart's values: every aggregator setting the chart does not set, its
    scalar constraints kept (nested sections checked by the aggregator itself at start)."""
    model = AggregatorSettings.model_json_schema()
    properties: dict[str, Any] = {}
    for name, spec in model["properties"].items():
        if name in CHART_SET:
            continue
        if "$ref" in json.dumps(spec) or "anyOf" in spec:
            entry: dict[str, Any] = {"description": spec.get("description", "")}
            types = [option["type"] for option in spec.get("anyOf", []) if "type" in option]
            if types and "$ref" not in json.dumps(spec):
                entry["type"] = types
            elif spec.get("type") in ("array", "object"):
                entry["type"] = spec["type"]
        else:
            entry = {key: value for key, value in spec.items() if key in _KEPT}
        properties[name] = entry
    return {
        "type": "object",
        "additionalProperties": False,
        "description": "The aggregator's own settings (docs/configuration.md) but where it listens, its "
        "database, secrets, TLS and remediator, which the chart sets.",
        "properties": properties,
    }


def chart_schema_with_settings() -> str:
    """The chart's values.schema.json with its aggregator settings regenerated."""
    schema = json.loads(CHART_SCHEMA.read_text(encoding="utf-8"))
    schema["properties"]["aggregator"]["properties"]["settings"] = chart_settings_schema()
    return json.dumps(schema, indent=2) + "\n"


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def drifted() -> list[str]:
    """One line per file of ``docs/schemas/`` that is missing or differs from what the models generate."""
    problems = []
    for name, schema in generated_schemas().items():
        path = SCHEMA_DIR / name
        if not path.is_file():
            problems.append(f"docs/schemas/{name}: missing")
        elif path.read_text(encoding="utf-8") != render(schema):
            problems.append(f"docs/schemas/{name}: differs from the models")
    if CHART_SCHEMA.read_text(encoding="utf-8") != chart_schema_with_settings():
        problems.append(
            "helm/gpuhealth/values.schema.json: aggregator.settings differs from the settings model"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    """Print, write (``--write``) or check (``--check``) the schemas; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m gpuhealth.schemas", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write the files into docs/schemas/")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 naming each file in docs/schemas/ that drifted"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = drifted()
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("regenerate with: python -m gpuhealth.schemas --write", file=sys.stderr)
        return 1 if problems else 0
    for name, schema in generated_schemas().items():
        if args.write:
            SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
            (SCHEMA_DIR / name).write_text(render(schema), encoding="utf-8")
        else:
            print(render(schema), end="")
    if args.write:
        CHART_SCHEMA.write_text(chart_schema_with_settings(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
