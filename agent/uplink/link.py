"""The agent's link to the aggregator: reports on change plus a heartbeat, and the humans' requests back.

The loop calls :meth:`AggregatorLink.apply_requests` before it judges a pass (a quarantine or release a human
asked for through ``gpuhealth quarantine`` / ``release``) and :meth:`AggregatorLink.observe` after it. Neither
talks to the network: ``observe`` only writes a report to the durable outbox (``agent/uplink/outbox.py``)
when something changed or a heartbeat is due, and wakes the sender thread, which delivers the outbox in order
(:meth:`deliver`). So an XID pass taints the node at once even when the aggregator hangs or is down, and
reports wait on disk until it is back (also across agent restarts).

A "change" is a new state, incident, incident reasons or action, verdict action or set of finding codes;
steps applied and requests applied are news too. Anything else is a heartbeat every ``heartbeat_s``.

Reports carry an epoch (the machine's boot id at first). An answer ``accepted: false`` is a retry the
aggregator already counted, unless it says the report was refused or names a last seq above the report's:
then the node's sequence was taken over (a seq far ahead, sent before per-node identities or by a lost
outbox) and every later report would be ignored. The link then starts a new epoch, which restarts the
node's sequence at the aggregator, and carries the refused report's actions and acknowledgements into the
next report, so nothing it said is lost.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from pydantic import ValidationError

from agent.diagnostics.order import DiagOrder
from agent.uplink.client import AggregatorClient, AggregatorError, RequestRejected, Unauthorized
from agent.uplink.outbox import OutboxError, ReportOutbox
from core.aggregator_api import (
    ActionTaken,
    GpuReadings,
    GpuSummary,
    IncidentReport,
    NodeRequest,
    Report,
    ReportAck,
    RequestKind,
    reportable_finding,
)
from core.clock import Clock
from core.findings import Verdict, worst_status
from core.health import NodeHealth, NodeState
from core.snapshot import GpuSnapshot
from core.steps import ApplyReport, Step

if TYPE_CHECKING:
    from agent.diagnostics.runner import DiagnosticsRunner
    from agent.loop import TickResult
    from agent.state.machine import HealthStateMachine

log = structlog.get_logger(__name__)

MAX_GPUS = 64  # the report format's limit
MAX_ACTIONS = 200
MAX_FINDINGS = 500
MIN_INTERVAL_S = 1.0  # the report format's lowest interval; a faster loop reports it as 1 s
RETRY_S = 5.0  # how soon the sender tries again after a failed delivery
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

_STEP_ACTIONS: dict[str, str] = {
    "SetCondition": "condition",
    "SetStateLabel": "label",
    "SetTaint": "taint",
    "RemoveTaint": "untaint",
    "SetDeviceTaints": "device-taint",
    "RemoveDeviceTaints": "device-untaint",
    "Cordon": "cordon",
    "Uncordon": "uncordon",
    "SetIncidentAnnotation": "annotate",
    "EmitEvent": "event",
    "RequestPermit": "permit",
    "WithdrawReboot": "reboot",  # a requested reboot that never happened: a failed reboot attempt
}


@dataclass(frozen=True)
class DeliveryStats:
    """What the sender did so far: reports accepted, repeats the aggregator had already counted, failures,
    and reports refused for a sequence conflict (each started a new epoch)."""

    accepted: int = 0
    repeated: int = 0
    failures: int = 0
    conflicts: int = 0


class AggregatorLink:
    """Reports, heartbeats and requests between one node's agent and the aggregator."""

    def __init__(
        self,
        node: str,
        client: AggregatorClient,
        outbox: ReportOutbox,
        *,
        clock: Clock,
        heartbeat_s: float = 60.0,
        interval_s: float | None = None,
        orchestrator: str = "kubernetes",
        labels: Mapping[str, str] | None = None,
        epoch: str | None = None,
    ) -> None:
        self.node = node
        self.client = client
        self.outbox = outbox
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._interval_s = interval_s
        self._orchestrator = orchestrator
        self._labels = dict(labels or {})
        self._epoch = epoch or boot_epoch()
        self._carried_actions: list[ActionTaken] = []  # from refused reports, under _lock
        self._carried_acknowledgements: list[int] = []
        self._last_key: tuple[object, ...] | None = None
        self._last_sent = float("-inf")
        self._actions: list[ActionTaken] = []
        self._to_acknowledge: list[int] = []
        self._lock = threading.Lock()  # requests arrive on the sender thread, are applied on the loop's
        self._requests: dict[int, NodeRequest] = {}
        self._applied: set[int] = set()
        self._stats = DeliveryStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = log.bind(node=node)

    # --- the loop's side --------------------------------------------------------------------------------

    def apply_requests(
        self, machine: HealthStateMachine, diagnostics: DiagnosticsRunner | None = None
    ) -> list[NodeRequest]:
        """Apply the humans' pending quarantine / release requests to the state machine, and hand diag
        requests to ``diagnostics``, oldest first; the next report acknowledges them. Returns the requests
        applied."""
        with self._lock:
            requests = sorted(self._requests.values(), key=lambda request: request.id)
            self._requests.clear()
        for request in requests:
            if request.kind is RequestKind.DIAG:
                self._diag_requested(request, diagnostics)
            elif request.kind is RequestKind.QUARANTINE:
                machine.quarantine(f"{request.reason} (by {request.requested_by})")
            else:
                machine.release_by_human(f"{request.reason} (by {request.requested_by})")
            self._log.info("request_applied", request=request.id, kind=request.kind.value)
            self._applied.add(request.id)
            self._to_acknowledge.append(request.id)
        return requests

    def _diag_requested(self, request: NodeRequest, diagnostics: DiagnosticsRunner | None) -> None:
        order = diag_order(request)
        if diagnostics is not None:
            diagnostics.request(order)
            return
        message = f"{order.describe()} refused: this agent runs no diagnostics"
        self._actions.append(
            ActionTaken(at=self._clock.now(), action="diag", result="skipped", message=message)
        )

    def note(self, actions: list[ActionTaken]) -> None:
        """Timeline entries that are not plan steps (deep diagnostics); sent with the next report."""
        self._actions.extend(actions)

    def observe(self, result: TickResult, *, dry_run: bool = False) -> Report | None:
        """Queue a report of this pass when something changed or a heartbeat is due; returns it if queued.

        Never touches the network; an outbox that cannot be written is logged (the node stays marked).
        """
        self._actions.extend(actions_taken(result.report, self._clock.now(), result.health, dry_run=dry_run))
        with self._lock:
            carried, self._carried_actions = self._carried_actions, []
            self._to_acknowledge.extend(self._carried_acknowledgements)
            self._carried_acknowledgements = []
        self._actions[:0] = carried
        key = change_key(result.health, result.verdict)
        changed = key != self._last_key or bool(self._actions) or bool(self._to_acknowledge)
        due = self._clock.monotonic() - self._last_sent >= self._heartbeat_s
        if not (changed or due):
            return None
        report = self._build(result)
        try:
            self.outbox.append(report, heartbeat=not changed)
        except OutboxError as exc:
            self._log.error("report_not_queued", error=str(exc))
            return None
        self._last_key, self._last_sent = key, self._clock.monotonic()
        self._actions, self._to_acknowledge = [], []
        self._wake.set()
        return report

    def _build(self, result: TickResult) -> Report:
        now = self._clock.now()
        with self._lock:
            epoch = self._epoch
        return build_report(
            self.node,
            self.outbox.next_seq(int(now.timestamp() * 1000)),
            now,
            result.health,
            result.verdict,
            gpus=gpu_summaries(result),
            actions=self._actions[-MAX_ACTIONS:],
            acknowledged=self._to_acknowledge,
            interval_s=self._interval_s,
            orchestrator=self._orchestrator,
            epoch=epoch,
            labels=self._labels,
        )

    @property
    def epoch(self) -> str:
        """The epoch of the reports built now."""
        with self._lock:
            return self._epoch

    # --- the sender's side ------------------------------------------------------------------------------

    def deliver(self) -> int:
        """Send the queued reports in order until one fails; returns how many the aggregator acknowledged."""
        delivered = 0
        for report in self.outbox.pending():
            try:
                ack = self.client.report(report)
            except Unauthorized as exc:
                self._failed("report_unauthorized", exc)
                break
            except RequestRejected as exc:  # too large or invalid: sending it again can never succeed
                if not self._dead_letter(report, exc):
                    break
                continue
            except AggregatorError as exc:
                self._failed("report_not_delivered", exc)
                break
            if sequence_conflict(report, ack):
                self._restart_sequence(report, ack)
            else:
                self._count(accepted=ack.accepted)
            self._receive(ack.pending_requests)
            if ack.hold:
                self._log.info("aggregator_hold", hold=ack.hold)
            delivered += 1
            try:
                self.outbox.remove_through(report.seq)
            except OutboxError as exc:
                # Still queued, in memory as on disk: it is sent again later and the aggregator ignores a
                # sequence number it already has. Stop here; the disk may have room by then.
                self._log.warning("outbox_not_written", error=str(exc), queued=self.outbox.stats().queued)
                break
        return delivered

    @property
    def stats(self) -> DeliveryStats:
        """Delivery counters since start."""
        return self._stats

    def start(self) -> None:
        """Deliver from a background thread: at once after each queued report, then every few seconds
        while reports wait (the aggregator may be back)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"gpuhealth-reports:{self.node}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the sender thread (reports not delivered stay in the outbox)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        """Stop the sender and close the HTTP client."""
        self.stop()
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.deliver()
            except Exception:  # noqa: BLE001 - a bug in one delivery must not end the sender
                self._log.exception("report_sender_failed")
            self._wake.wait(RETRY_S if self.outbox.stats().queued else self._heartbeat_s)

    def _receive(self, requests: list[NodeRequest]) -> None:
        with self._lock:
            for request in requests:
                if request.status == "pending" and request.id not in self._applied:
                    self._requests[request.id] = request

    def _restart_sequence(self, report: Report, ack: ReportAck) -> None:
        """The aggregator did not count ``report`` and never will in this epoch: start a new one, and carry
        what the report said that a later report would not repeat (actions, acknowledgements)."""
        with self._lock:
            if report.epoch == self._epoch:
                self._epoch = fresh_epoch(self._epoch)
            self._carried_actions.extend(report.actions)
            self._carried_acknowledgements.extend(report.acknowledged_requests)
            epoch = self._epoch
        self._last_key = None  # the next pass reports at once, in the new epoch
        stats = self._stats
        self._stats = DeliveryStats(stats.accepted, stats.repeated, stats.failures, stats.conflicts + 1)
        self._log.warning(
            "report_sequence_conflict",
            seq=report.seq,
            last_seq=ack.last_seq,
            refused=ack.refused,
            new_epoch=epoch,
        )

    def _dead_letter(self, report: Report, exc: RequestRejected) -> bool:
        """Set a report the aggregator refused for good aside, so the later ones are not blocked behind it
        forever; True when it is out of the queue. Its actions reach the aggregator only through the node's
        later reports (the node's state and incident are in every one)."""
        try:
            where = self.outbox.dead_letter(report, str(exc))
        except OutboxError as write_error:
            self._log.warning("outbox_not_written", error=str(write_error))
            return False
        self._log.error("report_rejected", seq=report.seq, reason=str(exc), set_aside=str(where))
        return True

    def _count(self, *, accepted: bool) -> None:
        stats = self._stats
        self._stats = DeliveryStats(
            accepted=stats.accepted + accepted,
            repeated=stats.repeated + (not accepted),
            failures=stats.failures,
            conflicts=stats.conflicts,
        )

    def _failed(self, event: str, exc: AggregatorError) -> None:
        stats = self._stats
        self._stats = DeliveryStats(stats.accepted, stats.repeated, stats.failures + 1, stats.conflicts)
        self._log.warning(event, error=str(exc), queued=self.outbox.stats().queued)


def sequence_conflict(report: Report, ack: ReportAck) -> bool:
    """Whether a report that did not count was refused, or lies behind a seq this agent never sent.

    A retry of a report the aggregator already counted comes back with ``last_seq`` equal to its seq (the
    outbox sends in order, so nothing later was sent yet); anything above it was not ours."""
    if ack.accepted:
        return False
    return ack.refused is not None or (ack.last_seq is not None and ack.last_seq > report.seq)


def boot_epoch() -> str:
    """The first epoch of this agent: the machine's boot id (a reboot starts a new sequence), else random."""
    try:
        boot_id = BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return secrets.token_hex(8)
    return boot_id[:40] if boot_id and boot_id.replace("-", "").isalnum() else secrets.token_hex(8)


def fresh_epoch(previous: str) -> str:
    """A new epoch after a sequence conflict: the previous one's base with a random suffix."""
    return f"{previous.split('.', maxsplit=1)[0][:40]}.{secrets.token_hex(6)}"


def diag_order(request: NodeRequest) -> DiagOrder:
    """The run a diag request asks for."""
    return DiagOrder(
        level=request.level or 1,
        requested_by=request.requested_by,
        reason=request.reason,
        force=request.force,
        request_id=request.id,
    )


def change_key(health: NodeHealth, verdict: Verdict) -> tuple[object, ...]:
    """What must differ between two passes for the second to be reported at once (not as a heartbeat)."""
    incident = health.incident
    return (
        health.state,
        incident.id if incident else None,
        tuple(incident.reasons) if incident else (),
        incident.action if incident else None,
        verdict.action,
        tuple(sorted({finding.code for finding in verdict.findings})),
    )


def actions_taken(
    report: ApplyReport, at: datetime, health: NodeHealth, *, dry_run: bool = False
) -> list[ActionTaken]:
    """The applied steps as timeline entries of the report format (``dry_run``: planned, not applied)."""
    incident_id = health.incident.id if health.incident else None
    return [
        ActionTaken(
            at=at,
            action=_action_name(result.step),
            result="shadow" if result.shadow else "dry_run" if dry_run else "ok" if result.ok else "failed",
            message=result.detail[:1000],
            incident_id=incident_id,
        )
        for result in report.results
    ]


def gpu_summaries(result: TickResult) -> list[GpuSummary]:
    """Each GPU of the snapshot with the worst status of its findings."""
    summaries = []
    for gpu in result.snapshot.gpus[:MAX_GPUS]:
        statuses = [finding.status for finding in result.verdict.findings if finding.gpu == gpu.uuid]
        summaries.append(
            GpuSummary(
                uuid=gpu.uuid,
                index=gpu.index,
                name=gpu.name,
                status=worst_status(statuses),
                pci_bus_id=_fits(gpu.pci_bus_id),
                serial=_fits(gpu.serial),
                readings=gpu_readings(gpu, result.snapshot.driver_version),
            )
        )
    return summaries


def gpu_readings(gpu: GpuSnapshot, driver_version: str | None) -> GpuReadings | None:
    """What the aggregator compares with the GPU's peers; None for a lost GPU (nothing to compare)."""
    if gpu.lost:
        return None
    pcie, rows, pages = gpu.pcie, gpu.remapped_rows, gpu.retired_pages
    nvlink = [
        count
        for link in gpu.nvlink or []
        for count in (link.replay_errors, link.recovery_errors, link.crc_errors)
        if count is not None
    ]
    try:
        return GpuReadings(
            driver_version=_fits(driver_version),
            utilization_pct=gpu.utilization_pct,
            sm_clock_mhz=gpu.sm_clock_mhz,
            max_sm_clock_mhz=gpu.max_sm_clock_mhz,
            clocks_event_reasons=gpu.clocks_event_reasons,
            power_w=gpu.power_w,
            power_limit_w=gpu.power_limit_w,
            temperature_c=gpu.temperature_c,
            pcie_gen=pcie.gen if pcie else None,
            pcie_width=pcie.width if pcie else None,
            pcie_max_gen=pcie.max_gen if pcie else None,
            pcie_max_width=pcie.max_width if pcie else None,
            pcie_replays=pcie.replay_counter if pcie else None,
            nvlink_errors=sum(nvlink) if nvlink else None,
            vbios_version=_fits(gpu.vbios_version),
            remapped_rows_correctable=rows.correctable if rows else None,
            remapped_rows_uncorrectable=rows.uncorrectable if rows else None,
            remap_pending=rows.pending if rows else None,
            remap_failure=rows.failure if rows else None,
            retired_pages_single_bit=pages.single_bit if pages else None,
            retired_pages_double_bit=pages.double_bit if pages else None,
            retired_pages_pending=pages.pending if pages else None,
            ecc_aggregate_uncorrected=gpu.ecc.aggregate_uncorrected if gpu.ecc else None,
        )
    except ValidationError:
        return None  # an absurd reading: no comparison rather than a refused report


def _fits(text: str | None, limit: int = 64) -> str | None:
    """An identity field the report can carry (an odd reading longer than the wire allows is left out,
    rather than the aggregator refusing the whole report)."""
    return text if text is not None and len(text) <= limit else None


def build_report(
    node: str,
    seq: int,
    now: datetime,
    health: NodeHealth,
    verdict: Verdict,
    *,
    gpus: list[GpuSummary],
    actions: list[ActionTaken],
    acknowledged: list[int],
    interval_s: float | None,
    orchestrator: str,
    epoch: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Report:
    """One ``gpuhealth.report/v1`` report of the node's health."""
    incident = health.incident
    return Report.model_validate(
        {
            "node": node,
            "seq": seq,
            "epoch": epoch,
            "sent_at": now,
            "interval_s": max(interval_s, MIN_INTERVAL_S) if interval_s is not None else None,
            "orchestrator": orchestrator,
            "state": NodeState(health.state.value),
            "verdict": verdict.model_copy(
                update={"findings": [reportable_finding(f) for f in verdict.findings[:MAX_FINDINGS]]}
            ),
            "incident": (
                IncidentReport(
                    id=incident.id,
                    started_at=incident.started_at,
                    reasons=incident.reasons,
                    action=incident.action,
                )
                if incident is not None
                else None
            ),
            "gpus": gpus,
            "labels": dict(labels or {}),
            "actions": actions,
            "acknowledged_requests": acknowledged,
        }
    )


def _action_name(step: Step) -> str:
    return _STEP_ACTIONS.get(type(step).__name__, type(step).__name__.lower())
