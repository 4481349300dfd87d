"""Group commit of reports: concurrent reports share transactions, each is acknowledged after its commit,
and idempotency holds inside a batch."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from aggregator.batching import ReportWriter
from aggregator.queries import node_list
from aggregator.settings import load_settings
from aggregator.store.engine import open_database
from gpuhealth.core.aggregator_api import Report
from gpuhealth.core.clock import ManualClock
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
