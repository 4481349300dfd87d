"""JSON Schemas of the public formats, generated from the models.

``python -m gpuhealth.schemas --write`` regenerates ``docs/schemas/``; a test fails when the committed files
drift from the models, so a model change can never silently change a public contract.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpuhealth.core.findings import Verdict
from gpuhealth.core.snapshot import NodeSnapshot
from sim.scenario.model import Scenario

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"


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
    scenario = Scenario.model_json_schema(by_alias=True, mode="validation")
    scenario = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpuhealth.io/schemas/scenario.v1.json",
        **scenario,
    }
    return {
        "snapshot-v1.schema.json": snapshot,
        "verdict.schema.json": verdict,
        "scenario.v1.json": scenario,
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write the files into docs/schemas/")
    args = parser.parse_args()
    for name, schema in generated_schemas().items():
        if args.write:
            SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
            (SCHEMA_DIR / name).write_text(render(schema), encoding="utf-8")
        else:
            print(render(schema), end="")


if __name__ == "__main__":
    main()
