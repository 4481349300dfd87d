"""Schemathesis over the aggregator's OpenAPI document: no generated request gets a 5xx answer, and every
answer matches the documented schema. Bounded: at most 25 examples per operation, derandomized.

Schemathesis generates values the schema allows (JSON has no NaN, and it sends no lone surrogates);
``test_agg_openapi_poison.py`` puts those and the other poisons into every field of the same operations."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from aggregator.app import create_app
from aggregator.ingest import ingest_report
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import utc_now
from tests.aggregator.builders import AUTH, TOKEN, report

_DB = Path(tempfile.mkdtemp(prefix="gpuhealth-fuzz-")) / "aggregator.db"
_SETTINGS = load_settings(environ={}, database_url=f"sqlite:///{_DB}", token=TOKEN)


def _seeded_app() -> object:
    """An app whose store knows a few nodes, so generated requests reach real rows, not only 404s."""
    database = open_database(_SETTINGS)
    for name in ("node-1", "a", "0"):
        with database.write() as conn:
            ingest_report(
                conn,
                Report.model_validate(report(name, 1, "unhealthy", incident=f"inc-{name}")),
                _SETTINGS,
                utc_now(),
            )
    return create_app(_SETTINGS, database=database)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    schema = schemathesis.openapi.from_asgi("/openapi.json", _seeded_app())


@schema.parametrize()
@settings(
    max_examples=25, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
def test_no_generated_request_gets_a_server_error(case: schemathesis.Case[Any]) -> None:
    response = case.call(headers=AUTH)
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
