"""The central remediator's store (SQLite and PostgreSQL): drain orders under permits, leases, take-over.

The orchestrator's drain is replaced by a scripted one at our own seam (``aggregator.remediator.NodeDrain``):
these tests pin who runs which drain and what is written back, not how a node is drained (that is
``tests/scenario/kube/test_runbook_central_drain.py`` and ``tests/realkube/test_central_remediator.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import structlog

from aggregator.remediator import Remediator
from aggregator.remediator_settings import RemediatorSettings
from aggregator.settings import load_settings
from aggregator.store.engine import Database, open_database
from core.aggregator_api import DrainPhase
from core.clock import ManualClock
from remediation.executor.background_drain import DrainState, DrainUpdate
from tests.aggregator.builders import AUTH, TOKEN, report
from tests.aggregator.conftest import MakeClient

NODE = "gpu-node-1"
LEASE_S = 30.0


@dataclass
class ScriptedDrain:
    """A node's drain that ends when the test says so (``finish``)."""

    node: str
    state: DrainState | None = None
    news: list[DrainUpdate] = field(default_factory=list)
    ended: bool = False
    starts: int = 0

    def start(self, incident_id: str, deadline_s: float) -> str:
        assert deadline_s > 0
        self.starts += 1
        self.state = DrainState(incident_id)
        return "drain started"

    def updates(self) -> list[DrainUpdate]:
        taken, self.news = self.news, []
        return taken

    def wait(self, timeout_s: float) -> bool:
        assert timeout_s >= 0
        return self.ended

    def drained(self) -> None:
        """The drain ended; its requeue (the JobSet's suspend toggle, say) still runs."""
        assert self.state is not None
        self.state.phase = DrainPhase.COMPLETE
        self.news.append(DrainUpdate(self.state.incident_id, ok=True, detail="drain complete in 1.0 s"))

    def finish(self) -> None:
        assert self.state is not None
        self.state.phase = DrainPhase.COMPLETE
        self.news.append(DrainUpdate(self.state.incident_id, ok=True, detail="drain complete in 1.0 s"))
        self.news.append(DrainUpdate(self.state.incident_id, ok=True, detail="requeue: done", requeue=True))
        self.ended = True


@dataclass
class Drains:
    """Every drain a remediator built, by node."""

    built: list[ScriptedDrain] = field(default_factory=list)

    def __call__(self, node: str) -> ScriptedDrain:
        drain = ScriptedDrain(node)
        self.built.append(drain)
        return drain


@pytest.fixture
def database(database_url: str, make_client: MakeClient) -> Iterator[Database]:
    make_client()  # the app migrates the schema
    db = open_database(load_settings(environ={}, database_url=database_url, token=TOKEN))
    yield db
    db.dispose()


def remediator(db: Database, clock: ManualClock, name: str, drains: Drains) -> Remediator:
    settings = RemediatorSettings(name=name, lease_s=LEASE_S)
    return Remediator(db, settings, drains, clock.now)


def ordered_drain(make_client: MakeClient) -> tuple[Any, int]:
    """The node reported an incident, took a permit and ordered its drain; returns the client and permit."""
    api = make_client(permit_settle_s=0)  # the settle wait before a first permit has its own tests
    assert api.post(
        "/v1/reports", json=report(NODE, 1, "unhealthy", incident="inc-1"), headers=AUTH
    ).is_success
    permit = api.post(
        "/v1/permits", json={"node": NODE, "action": "reboot", "incident_id": "inc-1"}, headers=AUTH
    ).json()
    answer = api.post(f"/v1/permits/{permit['id']}/drain", json={"deadline_s": 600}, headers=AUTH)
    assert answer.status_code == 202, answer.text
    assert answer.json()["phase"] == "requested"
    return api, int(permit["id"])


def drain_record(api: Any, permit_id: int) -> dict[str, Any]:
    answer = api.get(f"/v1/permits/{permit_id}/drain", headers=AUTH)
    assert answer.status_code == 200, answer.text
    record: dict[str, Any] = answer.json()
    return record


def test_one_remediator_runs_an_order_and_writes_its_news_back_once(
    database: Database, make_client: MakeClient, clock: ManualClock
) -> None:
    """Ordered -> running (leased to the remediator) -> complete, with the drain's and requeue's lines
    numbered for the agent; a second order under the same permit returns the first, and a second pass
    starts nothing new."""
    api, permit_id = ordered_drain(make_client)
    drains = Drains()
    first = remediator(database, clock, "remediator-a", drains)
    assert first.run_once() == 1
    assert drain_record(api, permit_id)["phase"] == "running"
    assert drain_record(api, permit_id)["finished_at"] is None
    again = api.post(f"/v1/permits/{permit_id}/drain", json={"deadline_s": 1}, headers=AUTH).json()
    assert again["phase"] == "running"
    assert first.run_once() == 0 and len(drains.built) == 1

    drains.built[0].finish()
    first.run_once()
    record = drain_record(api, permit_id)
    assert record["phase"] == "complete" and record["finished_at"] is not None
    assert [(n["seq"], n["requeue"], n["detail"]) for n in record["news"]] == [
        (1, False, "drain complete in 1.0 s"),
        (2, True, "requeue: done"),
    ]
    assert first.running == 0


def test_a_lapsed_lease_is_taken_over_and_the_first_remediator_stops_reporting(
    database: Database, make_client: MakeClient, clock: ManualClock
) -> None:
    """Two aggregators on one database: the second never takes a drain the first holds; once the first's
    lease lapses (it died, or hung), the second resumes the drain, and the first, should it come back,
    writes nothing more for it."""
    api, permit_id = ordered_drain(make_client)
    a_drains, b_drains = Drains(), Drains()
    a = remediator(database, clock, "remediator-a", a_drains)
    b = remediator(database, clock, "remediator-b", b_drains)
    assert a.run_once() == 1
    clock.advance(LEASE_S / 2)
    assert b.run_once() == 0
    a.run_once()  # renews its lease
    clock.advance(LEASE_S / 2 + 1)
    assert b.run_once() == 0  # renewed: still a's

    clock.advance(LEASE_S + 1)
    assert b.run_once() == 1
    assert b_drains.built[0].starts == 1
    with structlog.testing.capture_logs() as logs:
        a_drains.built[0].finish()
        a.run_once()
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["central_drain_taken_over"]
    assert a.running == 0
    assert drain_record(api, permit_id)["phase"] == "running" and drain_record(api, permit_id)["news"] == []

    b_drains.built[0].finish()
    b.run_once()
    assert drain_record(api, permit_id)["phase"] == "complete"


def test_a_restarted_remediator_resumes_its_own_drain_at_once(
    database: Database, make_client: MakeClient, clock: ManualClock
) -> None:
    """Same name after a restart (the chart's single aggregator): the running drain is resumed on the first
    pass, without waiting for the lease."""
    api, permit_id = ordered_drain(make_client)
    assert remediator(database, clock, "remediator-a", Drains()).run_once() == 1
    restarted_drains = Drains()
    restarted = remediator(database, clock, "remediator-a", restarted_drains)
    assert restarted.run_once() == 1
    assert drain_record(api, permit_id)["detail"] == "drain resumed by remediator remediator-a"
    restarted_drains.built[0].finish()
    restarted.run_once()
    assert drain_record(api, permit_id)["phase"] == "complete"


def test_a_drain_whose_requeue_had_not_ended_is_resumed_after_a_restart(
    database: Database, make_client: MakeClient, clock: ManualClock
) -> None:
    """The remediator died after its drain wrote ``complete`` and before the requeue that follows it ended
    (a JobSet left suspended half-way through the toggle, found by the fault suite): the restarted one
    takes the drain again, so the requeue is finished, and only then is the drain finished. Before, only
    ``requested`` and ``running`` drains were taken, and the job stayed suspended for good."""
    api, permit_id = ordered_drain(make_client)
    first_drains = Drains()
    first = remediator(database, clock, "remediator-a", first_drains)
    assert first.run_once() == 1
    first_drains.built[0].drained()
    first.run_once()
    record = drain_record(api, permit_id)
    assert (record["phase"], record["finished_at"]) == ("complete", None)

    restarted_drains = Drains()
    restarted = remediator(database, clock, "remediator-a", restarted_drains)
    assert restarted.run_once() == 1
    assert drain_record(api, permit_id)["detail"] == "drain resumed by remediator remediator-a"
    restarted_drains.built[0].finish()
    restarted.run_once()
    record = drain_record(api, permit_id)
    assert record["phase"] == "complete" and record["finished_at"] is not None
    assert restarted.run_once() == 0  # finished: never taken again


def test_an_order_whose_permit_lapsed_before_it_ran_fails_and_is_never_started(
    database: Database, make_client: MakeClient, clock: ManualClock
) -> None:
    """The permit expired (the agent died) before any remediator took the order: it fails, nothing runs."""
    api, permit_id = ordered_drain(make_client)
    clock.advance(timedelta(days=1).total_seconds())
    drains = Drains()
    assert remediator(database, clock, "remediator-a", drains).run_once() == 0
    assert drains.built == []
    record = drain_record(api, permit_id)
    assert (record["phase"], record["detail"]) == ("failed", "not drained: the permit is no longer active")


def test_an_order_to_an_aggregator_without_a_remediator_waits_and_is_logged(
    database: Database, make_client: MakeClient
) -> None:
    """remediator.orchestrator off: the order is kept (another aggregator on the database may run one) and
    each order logs ``drain_ordered_without_remediator``, naming the node."""
    with structlog.testing.capture_logs() as logs:
        api, permit_id = ordered_drain(make_client)
    warned = [e for e in logs if e["event"] == "drain_ordered_without_remediator"]
    assert [(e["node"], e["permit"]) for e in warned] == [(NODE, permit_id)]
    assert drain_record(api, permit_id)["phase"] == "requested"
