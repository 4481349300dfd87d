"""Poisoned values in every field the OpenAPI document lets a caller send, on SQLite and PostgreSQL.

For each operation, a few derandomized valid requests come from Schemathesis (for ``POST /v1/reports`` also
a full report as an agent sends it, so the poison reaches every GPU, finding and action field); then every
string and number in the body (keys included), every path and every query parameter is replaced, one at a
time, by each poison: NaN, infinities, finite floats at the edge of double precision and integers beyond 64
bits, lone surrogates (escaped in JSON as ``\\ud800``), NUL, and over-long strings. The request is sent as raw
JSON text, because a client's own models would refuse these before they leave.

Asserted: no answer is a 5xx; NaN, infinities, lone surrogates, NUL and over-long strings in a body's
values are refused with a 4xx (a poisoned key may be an unknown field, which the models ignore, so there only
the 5xx rule holds); and nothing half-valid was stored: after each batch, every list the aggregator serves
(fleet, nodes, incidents, events, audit, permits, alerts, silences, breaker) still answers 200.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from aggregator.app import create_app
from aggregator.ingest import ingest_report
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import utc_now
from tests.aggregator.builders import AUTH, TOKEN, report

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

EXAMPLES_PER_OPERATION = 2
SEEDED_NODES = ("node-1", "a", "0")
# Text a JSON body carries for each poison; refused ones must get a 4xx in a body.
REFUSED_NUMBERS = ("NaN", "Infinity", "-Infinity", "1e400")
EDGE_NUMBERS = ("1.7976931348623157e308", "-1.7976931348623157e308", "5e-324", str(2**64), str(-(2**70)))
REFUSED_STRINGS = (
    '"\\ud800"',
    '"a\\udfffb"',
    '"a\\u0000b"',
    json.dumps("x" * 70_000),
    json.dumps("x" * 1_100_000),
)
PATH_POISONS = ("%00", "a%00b", "%ED%A0%80", "NaN", "1e400", str(2**64), "x" * 5000)
READS = (
    "/v1/fleet",
    "/v1/nodes",
    "/v1/incidents",
    "/v1/events",
    "/v1/audit",
    "/v1/permits?active=false",
    "/v1/alerts",
    "/v1/silences?active=false",
    "/v1/breaker",
    *(f"/v1/nodes/{name}" for name in SEEDED_NODES),
)

_PLACEHOLDER = "\x00poison\x00"  # a string no generated body holds; replaced by the poison's JSON text


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, Any]
    body: Any  # None: no body


@pytest.fixture
def app_client(database_url: str) -> Iterator[TestClient]:
    """The aggregator on a fresh database of each kind, knowing a few nodes with open incidents."""
    config = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(config)
    for name in SEEDED_NODES:
        with database.write() as conn:
            body = report(name, 1, "unhealthy", incident=f"inc-{name}")
            ingest_report(conn, Report.model_validate(body), config, utc_now())
    with TestClient(create_app(config, database=database), raise_server_exceptions=False) as client:
        yield client


def _schema() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Only the document is read: the app serves /openapi.json without touching its database.
        directory = Path(tempfile.mkdtemp(prefix="gpuhealth-poison-"))
        config = load_settings(environ={}, database_url=f"sqlite:///{directory / 'schema.db'}", token=TOKEN)
        return schemathesis.openapi.from_asgi("/openapi.json", create_app(config))


def _operations() -> list[Any]:
    found = [result.ok() for result in _schema().get_all_operations()]
    return [op for op in found if op.body or op.path_parameters or op.query]


def _examples(operation: Any) -> list[Request]:
    """A few valid requests of the operation, the same ones every run."""
    found: list[Request] = []

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def collect(case: Any) -> None:
        body = case.body if operation.body else None
        found.append(Request(case.method, case.formatted_path, dict(case.query or {}), body))

    collect()
    if operation.path == "/v1/reports":
        full = report("node-1", 2, "unhealthy", incident="inc-node-1", actions=[_action()], acknowledged=[1])
        found.append(Request("POST", "/v1/reports", {}, full))
    return found


def _action() -> dict[str, Any]:
    return {"step": "SetTaint", "ok": True, "detail": "tainted", "attempts": 1, "incident_id": "inc-node-1"}


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every string and number in a JSON value; a dict key's path ends in ("key", k)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, ("key", key)), key
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield path, value


def _replaced(value: Any, path: tuple[Any, ...]) -> Any:
    """A copy of ``value`` with the leaf (or key) at ``path`` replaced by the placeholder."""
    if not path:
        return _PLACEHOLDER
    head, rest = path[0], path[1:]
    if isinstance(head, tuple):  # a key: rename it, keep its value
        return {(_PLACEHOLDER if key == head[1] else key): item for key, item in value.items()}
    if isinstance(value, dict):
        return {key: (_replaced(item, rest) if key == head else item) for key, item in value.items()}
    return [(_replaced(item, rest) if index == head else item) for index, item in enumerate(value)]


def _poisoned_bodies(body: Any) -> Iterator[tuple[str, str, bool]]:
    """(what, raw JSON text, must be refused) for each leaf and each poison of its kind."""
    for path, leaf in _leaves(body):
        is_key = bool(path) and isinstance(path[-1], tuple)
        poisons: Iterator[tuple[str, bool]]
        if isinstance(leaf, str):
            poisons = ((text, True) for text in REFUSED_STRINGS)
        else:
            refused = ((text, True) for text in REFUSED_NUMBERS)
            poisons = itertools.chain(refused, ((text, False) for text in EDGE_NUMBERS))
        template = json.dumps(_replaced(body, path))
        for text, refused_always in poisons:
            raw = template.replace(json.dumps(_PLACEHOLDER), text, 1)
            # A renamed key may simply be an unknown field, which the models ignore: only no 5xx there.
            yield f"{path}={text[:40]}", raw, refused_always and not is_key


SEQ_SENTINEL = 987_654_321


def _send(client: TestClient, request: Request, *, url: str | None = None, raw: str | None = None) -> int:
    """The request as raw bytes (surrogates kept as their JSON escapes); the status of the answer."""
    headers = dict(AUTH)
    content: bytes | None = None
    if raw is not None:
        headers["Content-Type"] = "application/json"
        content = raw.encode()
    target = url or _url(request.path, request.query)
    answer = client.request(request.method, target, content=content, headers=headers)
    return int(answer.status_code)


def _url(path: str, query: dict[str, Any], encoded: dict[str, str] | None = None) -> str:
    """``path?query`` with the example's parameters quoted and ``encoded`` ones put in as they are."""
    parts = [
        f"{quote(str(k))}={quote(_query_text(v), safe='')}"
        for k, v in query.items()
        if k not in (encoded or {})
    ]
    parts += [f"{quote(k)}={v}" for k, v in (encoded or {}).items()]
    return f"{path}?{'&'.join(parts)}" if parts else path


def _query_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _reads_still_work(client: TestClient) -> list[str]:
    broken = []
    for read in READS:
        answer = client.get(read, headers=AUTH)
        if answer.status_code != 200:
            broken.append(f"GET {read}: {answer.status_code} {answer.text[:200]}")
    return broken


def _path_variants(operation: Any, request: Request) -> Iterator[tuple[str, str]]:
    """(what, path) with one path parameter replaced by each poison (percent-encoded as sent)."""
    for parameter in operation.path_parameters:
        for poison in PATH_POISONS:
            template = operation.path
            for other in operation.path_parameters:
                if other.name != parameter.name:
                    value = _path_value(request, operation, other.name)
                    template = template.replace(f"{{{other.name}}}", quote(str(value), safe=""))
            yield f"{parameter.name}={poison[:20]}", template.replace(f"{{{parameter.name}}}", poison)


def _path_value(request: Request, operation: Any, name: str) -> str:
    """The value the example put into path parameter ``name`` (read back from the formatted path)."""
    template = operation.path.split("/")
    actual = request.path.split("/")
    return next(a for t, a in zip(template, actual, strict=False) if t == f"{{{name}}}")


@pytest.mark.parametrize("operation", _operations(), ids=lambda op: f"{op.method.upper()} {op.path}")
def test_poisoned_values_get_a_4xx_and_leave_nothing_half_stored(
    app_client: TestClient, operation: Any
) -> None:
    failures: list[str] = []
    seq = itertools.count(10)
    for request in _examples(operation):
        body = request.body
        if operation.path == "/v1/reports":  # each poisoned report is newer than the last, not a replay
            body = {**body, "seq": SEQ_SENTINEL}
        for what, text, must_refuse in _poisoned_bodies(body) if body is not None else ():
            raw = text.replace(f'"seq": {SEQ_SENTINEL}', f'"seq": {next(seq)}', 1)
            status = _send(app_client, request, raw=raw)
            if status >= 500 or (must_refuse and not 400 <= status < 500):
                failures.append(f"body {what}: HTTP {status}")
        for what, path in _path_variants(operation, request):
            status = _send(app_client, request, url=_url(path, request.query), raw=_raw(request.body))
            if status >= 500:
                failures.append(f"path {what}: HTTP {status}")
        for name in request.query:
            for poison in PATH_POISONS:
                url = _url(request.path, request.query, {name: poison})
                status = _send(app_client, request, url=url, raw=_raw(request.body))
                if status >= 500:
                    failures.append(f"query {name}={poison[:20]}: HTTP {status}")
        failures.extend(_reads_still_work(app_client))
        assert not failures, "\n".join(failures[:30])


def _raw(body: Any) -> str | None:
    return None if body is None else json.dumps(body)
