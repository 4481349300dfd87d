"""The fleet page's grid: a GPU an open incident is about stays red after its finding clears, until the
incident closes; the other GPUs of the node keep their own colour."""

from __future__ import annotations

from typing import Any

from aggregator.ingest import ingest_report
from aggregator.queries import fleet_grid
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import ManualClock
from tests.aggregator.builders import TOKEN, report

NODE = "gpu-node-1"


def _with_gpu_status(body: dict[str, Any], index: int, status: str) -> dict[str, Any]:
    body["gpus"][index]["status"] = status
    return body


def test_the_incidents_gpu_stays_red_until_the_incident_closes(database_url: str, clock: ManualClock) -> None:
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)
    sequence = [
        report(NODE, 1, gpus=4),
        _with_gpu_status(report(NODE, 2, "unhealthy", gpus=4, incident="inc-1"), 2, "fail"),
        report(NODE, 3, "quarantined", gpus=4, incident="inc-1"),  # the XID left its window: GPU 2 reads ok
        report(NODE, 4, "quarantined", gpus=4, incident="inc-1"),
        report(NODE, 5, gpus=4),  # validated and released: the incident is closed
        report(NODE, 6, "quarantined", gpus=4, incident="inc-2"),  # a new incident about no GPU in particular
    ]
    letters = []
    try:
        for body in sequence:
            with database.write() as conn:
                assert ingest_report(conn, Report.model_validate(body), settings, clock.now()).accepted
            with database.read() as conn:
                letters.append(fleet_grid(conn, clock.now())[0].gpus)
    finally:
        database.dispose()
    assert letters == ["oooo", "oofo", "oofo", "oofo", "oooo", "oooo"]
