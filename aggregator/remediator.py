"""The central remediator: drains and requeues the nodes whose permits the aggregator granted.

Why here and not on the nodes (docs/security.md): evicting pods and restarting jobs reaches beyond one node,
and no Kubernetes RBAC rule or Nomad ACL ties those grants to a node, so an agent holding them could drain
the fleet. The remediator holds them instead, beside the aggregator that decides the budget, and acts only
on a drain an agent ordered under a permit that is active for that node and incident (``store/drains.py``).

It runs on a thread of the aggregator process. Each pass claims new orders (a lease in the store, so with
several aggregators on one PostgreSQL each drain runs in one of them, and a restarted aggregator resumes its
own drains at once by its stable name), starts each on the orchestrator's drain runner (the same code an
agent used to run: cordon, Eviction API, requeue), and writes every runner's news and phase back for the
agent to read. A resumed drain runs again from the start: every step of it is idempotent (a cordon that is
already there, pods already gone, a requeue already marked for the incident).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog

from aggregator.remediator_settings import RemediatorSettings
from aggregator.settings import AggregatorSettings
from aggregator.store import drains
from aggregator.store.engine import Database
from core.aggregator_api import DrainPhase
from remediation.executor.contract import DrainNews, DrainProgress

log = structlog.get_logger(__name__)


class NodeDrain(Protocol):
    """An orchestrator's drain of one node (``remediation.executor.background_drain.BackgroundDrain``)."""

    @property
    def state(self) -> DrainProgress | None: ...

    def start(self, incident_id: str, deadline_s: float) -> str: ...

    def updates(self) -> Sequence[DrainNews]: ...

    def wait(self, timeout_s: float) -> bool: ...


DrainFactory = Callable[[str], NodeDrain]
"""Builds the drain of the named node with the remediator's own credentials."""


@dataclass
class _Running:
    claimed: drains.Claimed
    drain: NodeDrain
    phase: str = DrainPhase.RUNNING


class Remediator:
    """Claims drain orders from the store and runs them; :meth:`run_once` is one pass (tests call it)."""

    def __init__(
        self,
        db: Database,
        settings: RemediatorSettings,
        drain_for: DrainFactory,
        now: Callable[[], datetime],
        *,
        closers: Sequence[Callable[[], object]] = (),
    ) -> None:
        self._db = db
        self._settings = settings
        self._drain_for = drain_for
        self._now = now
        self._closers = closers
        self.owner = settings.owner()
        self._running: dict[int, _Running] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.bind(remediator=self.owner)

    @property
    def running(self) -> int:
        """Drains this remediator runs now."""
        return len(self._running)

    def start(self) -> None:
        """Run passes on a thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="gpuhealth-remediator", daemon=True)
        self._thread.start()
        self._log.info("remediator_started", lease_s=self._settings.lease_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the passes. Drains still running keep their lease: the next start (same name) resumes them,
        and another aggregator takes them over once the lease lapses."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for close in self._closers:
            close()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every drain this remediator started has ended (tests, benchmarks)."""
        return all(running.drain.wait(timeout_s) for running in list(self._running.values()))

    def run_once(self) -> int:
        """One pass: start what was ordered, report what the running drains did; returns drains started."""
        now = self._now()
        started = self._start_new(now)
        self._report(now)
        return started

    # --- one pass ---------------------------------------------------------------------------------------

    def _start_new(self, now: datetime) -> int:
        if not self._running:
            with self._db.read() as conn:  # an idle fleet's pass costs one read, never the write lock
                if not drains.any_open(conn, now):
                    return 0
        room = self._settings.max_drains - len(self._running)
        with self._db.write() as conn:
            drains.renew(conn, self.owner, list(self._running), self._settings.lease_s, now)
            claimed = drains.claim(conn, self.owner, self._settings.lease_s, now, limit=max(room, 0))
        fresh = [c for c in claimed if c.permit_id not in self._running]
        started = 0
        for order in fresh:
            try:
                self._begin(order, now)
            except Exception as exc:  # noqa: BLE001 - the orchestrator is down: the lease is ours, retry next pass
                self._log.warning("central_drain_not_started", permit=order.permit_id, error=str(exc))
                continue
            started += 1
        return started

    def _begin(self, order: drains.Claimed, now: datetime) -> None:
        drain = self._drain_for(order.node)
        answer = drain.start(order.incident_id or f"permit-{order.permit_id}", order.deadline_s)
        self._running[order.permit_id] = _Running(order, drain)
        how = "resumed" if order.resumed else "started"
        detail = f"drain {how} by remediator {self.owner}"
        with self._db.write() as conn:
            drains.progress(conn, order.permit_id, self.owner, now, phase=DrainPhase.RUNNING, detail=detail)
        self._log.info(
            "central_drain_" + how, node=order.node, permit=order.permit_id, incident=order.incident_id,
            answer=answer,
        )  # fmt: skip

    def _report(self, now: datetime) -> None:
        for permit_id, running in list(self._running.items()):
            news = [(item.ok, item.detail, item.requeue) for item in running.drain.updates()]
            ended = running.drain.wait(0)  # the thread ended: the drain and its requeue are done
            state = running.drain.state
            phase = str(state.phase) if state is not None else DrainPhase.RUNNING
            if not news and phase == running.phase and not ended:
                continue
            detail = news[-1][1] if news else None
            with self._db.write() as conn:
                still_ours = drains.progress(
                    conn, permit_id, self.owner, now, phase=phase, detail=detail, news=news, finished=ended
                )
            running.phase = phase
            if not still_ours:
                self._log.warning("central_drain_taken_over", permit=permit_id, node=running.claimed.node)
            if ended or not still_ours:
                del self._running[permit_id]

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - a database hiccup must not end the remediator
                self._log.exception("remediator_pass_failed")
            self._stop.wait(self._settings.poll_s)


def build_remediator(
    db: Database, settings: AggregatorSettings, now: Callable[[], datetime], drain_for: DrainFactory | None
) -> Remediator | None:
    """The remediator the settings ask for (or one on the given drains), or None when it is off.

    Raises ExecutorSetupError (one line) when the orchestrator's configuration cannot be loaded."""
    section = settings.remediator
    if drain_for is not None:
        return Remediator(db, section, drain_for, now)
    if section.orchestrator == "off":
        return None
    if section.orchestrator == "nomad":  # python-nomad loads only in an aggregator that remediates on Nomad
        from remediation.nomad.central import NomadCentralDrains
        from remediation.nomad.drain import NomadDrainSetup

        setup = NomadDrainSetup(
            namespace=section.nomad.namespace, same_fault_window_s=section.requeue.same_fault_window_s
        )
        nomad = NomadCentralDrains(section.nomad, setup)
        return Remediator(db, section, nomad.drain_for, now, closers=(nomad.close,))
    # The Kubernetes client loads only in an aggregator that remediates on Kubernetes.
    from remediation.kubernetes.central import central_drains

    central = central_drains(section.kubeconfig, section.drain, section.requeue)
    return Remediator(db, section, central.drain_for, now, closers=(central.close,))
