"""The promises the fault suite holds the product to, checked on the recorded history of a run.

A run of the suite records (``fault_world`` does it) what each side saw: the reports the aggregator
acknowledged to each agent (the agents' ack journals), the aggregator's store afterwards (nodes,
incidents, alerts), every change of the API server's node and JobSet objects while it ran, and every alert
the receiver got. :func:`check` reads that history and names each broken promise; a run passes when the
list is empty. The promises (docs/reliability.md):

- ``acked_reports_stored``: every report the aggregator acknowledged is in its store: the node's last
  accepted sequence number of that epoch is at least the report's (or the node moved on to a newer epoch).
- ``incidents_kept``: every incident an acknowledged report carried is in the store, closed or still open.
- ``alerts_delivered``: every alert the store holds for a sink was received at least once, by its id.
- ``alerts_shown_once``: one alert per (kind, status, incident) in the store, and nothing received
  that the store does not hold: a restart or a retry never raises the same alert under a second id.
- ``one_restart_per_incident``: no job restarted more often than there were incidents.
- ``healthy_untouched``: a node the run did not break is never tainted nor cordoned.
- ``quarantine_kept``: a broken node, once tainted (or cordoned), stays so to the end: no fault lifts it.
- ``steady_in_time``: the fleet reached its steady state within the stated time after the fault healed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

INVARIANTS = (
    "acked_reports_stored",
    "incidents_kept",
    "alerts_delivered",
    "alerts_shown_once",
    "one_restart_per_incident",
    "healthy_untouched",
    "quarantine_kept",
    "steady_in_time",
)


@dataclass(frozen=True)
class Ack:
    """One report the aggregator answered, as the agent heard it."""

    node: str
    epoch: str | None
    seq: int
    accepted: bool
    incident: str | None


@dataclass(frozen=True)
class StoredNode:
    name: str
    epoch: str | None
    last_seq: int


@dataclass(frozen=True)
class StoredAlert:
    key: str
    kind: str
    status: str
    node: str | None
    incident_id: str | None
    sinks: tuple[str, ...]  # the sinks it was routed to (its delivery rows)


@dataclass(frozen=True)
class ReceivedAlert:
    id: str
    kind: str
    status: str
    node: str | None
    incident_id: str | None


@dataclass(frozen=True)
class NodeSample:
    """A node object as the API server stored it, at ``at`` (seconds, the recorder's clock)."""

    at: float
    tainted: bool
    cordoned: bool


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class History:
    """What one run recorded; see the module's docstring."""

    acks: list[Ack] = field(default_factory=list)
    nodes: dict[str, StoredNode] = field(default_factory=dict)
    incidents: dict[str, str] = field(default_factory=dict)  # id -> node
    alerts: list[StoredAlert] = field(default_factory=list)
    received: list[ReceivedAlert] = field(default_factory=list)
    samples: dict[str, list[NodeSample]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # job -> restarts seen
    broken: set[str] = field(default_factory=set)
    sink: str = "receiver"
    healed_at: float | None = None
    steady_at: float | None = None
    steady_within_s: float = 60.0


def check(history: History) -> list[Violation]:
    """Every broken promise of ``history``; empty when all held."""
    return [
        *_acked_reports_stored(history),
        *_incidents_kept(history),
        *_alerts(history),
        *_restarts(history),
        *_healthy_untouched(history),
        *_quarantine_kept(history),
        *_steady(history),
    ]


def _acked_reports_stored(history: History) -> Iterable[Violation]:
    highest: dict[tuple[str, str | None], int] = {}
    for ack in history.acks:
        if ack.accepted:
            key = (ack.node, ack.epoch)
            highest[key] = max(highest.get(key, 0), ack.seq)
    for (node, epoch), seq in sorted(highest.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        stored = history.nodes.get(node)
        if stored is None:
            yield Violation("acked_reports_stored", f"{node}: seq {seq} acknowledged, node not in the store")
        elif stored.epoch == epoch and stored.last_seq < seq:
            yield Violation(
                "acked_reports_stored",
                f"{node}: seq {seq} of epoch {epoch} acknowledged, the store's last is {stored.last_seq}",
            )


def _incidents_kept(history: History) -> Iterable[Violation]:
    carried = {(ack.incident, ack.node) for ack in history.acks if ack.accepted and ack.incident}
    for incident, node in sorted(carried, key=str):
        if incident not in history.incidents:
            yield Violation("incidents_kept", f"{node}: incident {incident} acknowledged, not in the store")


def _alerts(history: History) -> Iterable[Violation]:
    received: dict[str, int] = defaultdict(int)
    for got in history.received:
        received[got.id] += 1
    keys = {alert.key for alert in history.alerts}
    same: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for alert in history.alerts:
        if alert.incident_id is not None:  # a node's episodes (stale, back) may repeat; an incident's may not
            same[(alert.kind, alert.status, alert.incident_id)].append(alert.key)
        if history.sink in alert.sinks and received[alert.key] == 0:
            yield Violation("alerts_delivered", f"{alert.kind}/{alert.status} {alert.key} never received")
    for (kind, status, subject), alert_keys in sorted(same.items()):
        if len(alert_keys) > 1:
            yield Violation(
                "alerts_shown_once", f"{kind}/{status} for {subject} raised {len(alert_keys)} times"
            )
    for alert_id in sorted(set(received) - keys):
        yield Violation("alerts_shown_once", f"received {alert_id}, which the store does not hold")


def _restarts(history: History) -> Iterable[Violation]:
    incidents = len(history.incidents)
    for job, count in sorted(history.restarts.items()):
        if count > incidents:
            yield Violation(
                "one_restart_per_incident", f"{job} restarted {count} times for {incidents} incident(s)"
            )


def _healthy_untouched(history: History) -> Iterable[Violation]:
    for node, samples in sorted(history.samples.items()):
        if node in history.broken:
            continue
        touched = [s for s in samples if s.tainted or s.cordoned]
        if touched:
            first = touched[0]
            yield Violation(
                "healthy_untouched",
                f"{node} (never broken) tainted={first.tainted} cordoned={first.cordoned} at {first.at:.3f}",
            )


def _quarantine_kept(history: History) -> Iterable[Violation]:
    for node in sorted(history.broken):
        samples = history.samples.get(node, [])
        for mark in ("tainted", "cordoned"):
            values = [getattr(s, mark) for s in samples]
            if True in values:
                first = values.index(True)
                lifted = [s for s in samples[first:] if not getattr(s, mark)]
                if lifted:
                    yield Violation(
                        "quarantine_kept", f"{node}: {mark} at first, lifted at {lifted[0].at:.3f}"
                    )


def _steady(history: History) -> Iterable[Violation]:
    if history.healed_at is None:
        return
    if history.steady_at is None:
        yield Violation(
            "steady_in_time", f"no steady state within {history.steady_within_s:.0f} s of the heal"
        )
    elif history.steady_at - history.healed_at > history.steady_within_s:
        took = history.steady_at - history.healed_at
        yield Violation(
            "steady_in_time", f"steady {took:.1f} s after the heal, over {history.steady_within_s} s"
        )


def held(violations: Iterable[Violation]) -> Mapping[str, bool]:
    """Per invariant, whether it held (for the suite's tally)."""
    broken = {violation.invariant for violation in violations}
    return {name: name not in broken for name in INVARIANTS}
