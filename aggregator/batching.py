"""Group commit for agent reports: one writer thread stores queued reports in shared transactions.

Reports are most of the traffic and each is a short transaction; its cost is dominated by the commit (a
sync of the WAL on SQLite, a round trip and WAL flush on PostgreSQL). While one batch commits, new reports
queue up and go into the next transaction together, so the commit cost is shared under load while a
lone report still goes out at once. Every report is acknowledged only after the transaction holding it has
committed, so an acknowledged report is never lost. If a batch fails, its reports are retried one by one
so that one bad report cannot fail the others.

On PostgreSQL several writer threads store batches in parallel transactions (``report_writers``): a
transaction spends most of its time waiting on the server's round trips, and the rows a report locks are
its own node's. Each batch locks its nodes in name order, so two batches can never wait on each other's
node rows; a rare deadlock through the breaker's row is broken by the server and the batch retried one by one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from aggregator.history_budget import HistoryBudget
from aggregator.ingest import NodeBatch, ingest_report
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import Database
from core.aggregator_api import Report, ReportAck

log = structlog.get_logger(__name__)

MAX_BATCH = 128


@dataclass
class _Pending:
    report: Report
    future: asyncio.Future[ReportAck]
    loop: asyncio.AbstractEventLoop


class ReportWriter:
    """Queue reports from the event loop; a single thread stores them in batches."""

    def __init__(self, database: Database, settings: AggregatorSettings, now: Callable[[], datetime]) -> None:
        self._database = database
        self._settings = settings
        self._now = now
        self._queue: list[_Pending] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._thread_count = 1 if database.is_sqlite else settings.report_writers
        self._stopping = False
        self._history = HistoryBudget(settings.history_rows_per_node_per_minute)

    async def submit(self, report: Report) -> ReportAck:
        """Store ``report``; returns once its transaction has committed."""
        loop = asyncio.get_running_loop()
        pending = _Pending(report, loop.create_future(), loop)
        with self._wake:
            self._queue.append(pending)
            if not self._threads:
                self._start_threads()
            self._wake.notify()
        return await pending.future

    def stop(self) -> None:
        """Finish what is queued, then end the threads (a later submit starts new ones)."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=30)
        with self._wake:
            self._stopping = False
            self._threads = []
            if self._queue:  # submitted while the old threads were finishing
                self._start_threads()

    def _start_threads(self) -> None:
        """Start the writer threads; called with the lock held."""
        for number in range(self._thread_count):
            thread = threading.Thread(target=self._run, name=f"report-writer-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self._store(sorted(batch, key=lambda item: item.report.node))

    def _store(self, batch: list[_Pending]) -> None:
        try:
            with self._database.write() as conn:
                nodes = NodeBatch(conn, [item.report.node for item in batch])
                acks = [
                    ingest_report(
                        conn, item.report, self._settings, self._now(), nodes, history=self._history
                    )
                    for item in batch
                ]
                nodes.flush()
        except Exception as exc:  # noqa: BLE001 - whatever failed must reach the waiting request, not kill the thread
            if len(batch) == 1:
                batch[0].loop.call_soon_threadsafe(_reject, batch[0].future, exc)
                return
            log.warning("report batch failed; storing its reports one by one", reports=len(batch))
            for item in batch:
                self._store([item])
            return
        for item, ack in zip(batch, acks, strict=True):
            item.loop.call_soon_threadsafe(_resolve, item.future, ack)


def _resolve(future: asyncio.Future[ReportAck], ack: ReportAck) -> None:
    if not future.done():
        future.set_result(ack)


def _reject(future: asyncio.Future[ReportAck], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
