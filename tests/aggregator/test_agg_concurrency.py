"""200 concurrent permit requests never exceed the budget: two live aggregator processes on one database
(SQLite file, and PostgreSQL), the database arbitrating."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from aggregator.ingest import ingest_report
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import open_database
from aggregator.store.tables import events, permits
from core.aggregator_api import Report
from core.clock import utc_now
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import StartAggregator

NODES = 200
BUDGET = 7


def _seed(settings: AggregatorSettings) -> None:
    """Every node reports once (straight into the store: the HTTP path is not what this test is about)."""
    database = open_database(settings)
    try:
        for number in range(NODES):
            with database.write() as conn:
                ingest_report(
                    conn, Report.model_validate(report(f"node-{number}", 1, gpus=1)), settings, utc_now()
                )
    finally:
        database.dispose()


async def _ask_all(urls: list[str]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=NODES)
    async with httpx.AsyncClient(headers=AUTH, timeout=60, limits=limits) as client:
        asks = [
            client.post(f"{urls[n % len(urls)]}/v1/permits", json={"node": f"node-{n}", "action": "reboot"})
            for n in range(NODES)
        ]
        return list(await asyncio.gather(*asks))


@pytest.mark.slow
def test_concurrent_permit_requests_to_two_aggregators_never_exceed_the_budget(
    database_url: str, start_aggregator: StartAggregator
) -> None:
    settings = {"database_url": database_url, "budget_max_nodes": BUDGET, "budget_max_percent": 100}
    _seed(AggregatorSettings(token=TOKEN, **settings))
    first, second = start_aggregator(**settings), start_aggregator(**settings)

    answers = asyncio.run(_ask_all([first.url, second.url]))

    codes = [answer.status_code for answer in answers]
    assert codes.count(201) == BUDGET
    assert codes.count(409) == NODES - BUDGET
    assert {a.json()["code"] for a in answers if a.status_code == 409} == {"budget_exhausted"}
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(permits)).scalar_one() == BUDGET
            decisions = (
                select(func.count())
                .select_from(events)
                .where(events.c.kind.in_(["permit_granted", "permit_refused"]))
            )
            assert conn.execute(decisions).scalar_one() == NODES
    finally:
        engine.dispose()
