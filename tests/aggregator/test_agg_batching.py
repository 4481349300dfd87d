"""Group commit of reports: concurrent reports share transactions, each is acknowledged after its commit,
and idempotency holds inside a batch."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from aggregator import breaker
from aggregator.batching import ReportWriter
from aggregator.ingest import NodeBatch, ingest_report
from aggregator.queries import node_list
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from core.aggregator_api import Report
from core.clock import ManualClock
from tests.aggregator.builders import TOKEN, report


def test_concurrent_reports_share_commits_and_duplicates_in_a_batch_count_once(
    database_url: str, clock: ManualClock
) -> None:
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)
    commits: list[int] = []
    event.listen(database.writer, "commit", lambda _conn: commits.append(1))
    writer = ReportWriter(database, settings, clock.now)
    bodies = [Report.model_validate(report(f"node-{n % 50}", 1, gpus=1)) for n in range(100)]

    async def send_all() -> list[Any]:
        return list(await asyncio.gather(*(writer.submit(body) for body in bodies)))

    try:
        acks = asyncio.run(send_all())
        assert sum(ack.accepted for ack in acks) == 50  # every node's second copy is a retry
        assert len(commits) < 100  # batched: fewer transactions than reports
        with database.read() as conn:
            nodes = node_list(conn, clock.now())
        assert [node.reports_accepted for node in nodes] == [1] * 50
    finally:
        writer.stop()
        database.dispose()


def test_one_batch_decides_each_report_on_what_the_reports_before_it_wrote(
    database_url: str, clock: ManualClock
) -> None:
    """Rows locked together and updates sent together: a node met twice in the batch is read again after
    its first update, and the breaker counts states written earlier in the same batch."""
    settings = load_settings(environ={}, database_url=database_url, token=TOKEN)
    database = open_database(settings)
    try:
        with database.write() as conn:
            registration = NodeBatch(conn, [f"node-{n}" for n in range(10)])
            for n in range(10):
                ingest_report(
                    conn,
                    Report.model_validate(report(f"node-{n}", 1, gpus=1)),
                    settings,
                    clock.now(),
                    registration,
                )
            registration.flush()
        batch_reports = [
            report("node-0", 2, gpus=1),
            report("node-1", 2, "unhealthy", gpus=1, incident="inc-1"),
            report("node-0", 3, "unhealthy", gpus=1, incident="inc-0"),
            report("node-0", 3, "unhealthy", gpus=1, incident="inc-0"),  # a retry inside the batch
            report("node-2", 2, "unhealthy", gpus=1, incident="inc-2"),
        ]
        with database.write() as conn:
            batch = NodeBatch(conn, [body["node"] for body in batch_reports])
            acks = [
                ingest_report(conn, Report.model_validate(body), settings, clock.now(), batch)
                for body in batch_reports
            ]
            batch.flush()
        assert [ack.accepted for ack in acks] == [True, True, True, False, True]
        with database.read() as conn:
            nodes = {node.name: node for node in node_list(conn, clock.now())}
            tripped = breaker.evaluate(conn, settings, clock.now())
        assert (nodes["node-0"].state, nodes["node-0"].reports_accepted) == ("unhealthy", 3)
        assert tripped  # 3 of 10 GPU nodes turned unhealthy in the window: over 20 %, at least 3
    finally:
        database.dispose()
