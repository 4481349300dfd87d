"""Timelines as a person reads them: in the order of cause, one row per transition's node writes.

The history mixes two clocks and several writers: an agent's actions carry the agent's time and reach the
aggregator with the next report, after the permit it asked for in between; the finding that opened an
incident is recorded when that report arrives, a moment after the taint it caused. In time order the taint
and the permit come before the fault. Here events close in time (a cluster: each within ``CLUSTER_S`` of
the cluster's first) are put in the order of cause — fault, incident opened, state, node writes, permit,
drain, requeue, recovery, release — and one cluster's node writes (condition, label, taint, cordon,
annotation, Event) become one row: ``marked: condition, label, taint, event``.
"""

from __future__ import annotations

from datetime import timedelta

from core.aggregator_api import Event

CLUSTER_S = 5.0
"""Events this close to the first of a cluster belong to one transition (one agent tick and its report)."""

MARKS = ("condition", "label", "annotate", "event", "taint", "device-taint", "cordon")
UNMARKS = ("untaint", "device-untaint", "uncordon")
_BAD_STATES = frozenset({"unhealthy", "quarantined"})

# The order of cause, by step.
FAULT, OPENED, STATE, NODE_WRITES, PERMIT, DRAIN, REQUEUE, RECOVERY, RELEASE, CLOSED = range(10)


_KIND_RANK = {
    "incident_opened": OPENED,
    "incident_closed": CLOSED,
    "incident_readings_after": CLOSED,  # aggregator/readings_ring.py: samples after the release
    "turned_unhealthy": STATE,
    "repeat_offender": STATE,
}


def cause_rank(event: Event) -> int:
    """Where ``event`` stands in the chain from fault to release."""
    kind = event.kind
    if kind == "findings":
        return RECOVERY if event.message == "findings cleared" else FAULT
    if kind == "state":
        return _state_rank(str(event.details.get("from", "")), str(event.details.get("to", "unhealthy")))
    if kind == "node_writes":
        return RELEASE if event.details.get("release") else NODE_WRITES
    if kind == "action":
        return _action_rank(str(event.details.get("action", "")))
    # Permits, requests, the breaker: decisions between the node's marks and its drain.
    return _KIND_RANK.get(kind, PERMIT)


def _state_rank(was: str, to: str) -> int:
    if to in _BAD_STATES:
        return STATE
    if was == "new":
        return FAULT  # the node's first report: where its history begins
    return RELEASE if to == "healthy" else RECOVERY


def _action_rank(action: str) -> int:
    if action in MARKS:
        return NODE_WRITES
    if action in UNMARKS or action == "release":
        return RELEASE
    if action == "permit":
        return PERMIT
    if action == "drain":
        return DRAIN
    if action == "requeue":
        return REQUEUE
    return RECOVERY  # reset, reboot, validate, diag


def arrange(events: list[Event], *, group: bool = False) -> list[Event]:
    """``events`` (any order) in clusters by time, each cluster in the order of cause; with ``group``, a
    cluster's node writes become one row (what a person reads; the API's timelines keep every line)."""
    ordered = sorted(events, key=lambda event: (event.at, event.id))
    arranged: list[Event] = []
    cluster: list[Event] = []
    for event in ordered:
        if cluster and event.at - cluster[0].at > timedelta(seconds=CLUSTER_S):
            arranged.extend(_in_cause_order(cluster, group=group))
            cluster = []
        cluster.append(event)
    arranged.extend(_in_cause_order(cluster, group=group))
    return arranged


def _in_cause_order(cluster: list[Event], *, group: bool) -> list[Event]:
    """A release's node writes (the label back to healthy as much as the taint's removal) come with the
    release, after the recovery that allowed it; an opening's after the fault."""
    releasing = any(_is_release(event) for event in cluster)
    rows = _group_node_writes(cluster, releasing) if group else cluster

    def rank(event: Event) -> int:
        found = cause_rank(event)
        return RELEASE if releasing and found == NODE_WRITES else found

    return sorted(rows, key=lambda event: (rank(event), event.at, event.id))


def _is_release(event: Event) -> bool:
    return (
        event.kind == "incident_closed"
        or (
            event.kind == "state"
            and event.details.get("to") == "healthy"
            and event.details.get("from") != "new"
        )
        or (event.kind == "action" and event.details.get("action") in UNMARKS)
    )


def _group_node_writes(cluster: list[Event], releasing: bool) -> list[Event]:
    """One row for the cluster's successful node writes (two or more); the rest as they are."""
    rows: list[Event] = []
    writes: list[Event] = []
    for event in cluster:
        action = str(event.details.get("action", ""))
        if event.kind == "action" and event.details.get("result") == "ok" and action in MARKS + UNMARKS:
            writes.append(event)
        else:
            rows.append(event)
    if len(writes) < 2:
        return rows + writes
    names = list(dict.fromkeys(str(write.details.get("action")) for write in writes))
    first = writes[0]
    rows.append(
        Event(
            id=first.id,
            at=first.at,
            node=first.node,
            incident_id=first.incident_id,
            kind="node_writes",
            message=f"{'released' if releasing else 'marked'}: {', '.join(names)}",
            details={"actions": names, "events": [write.id for write in writes], "release": releasing},
            count=max(write.count for write in writes),
            last_at=max(write.last_at or write.at for write in writes),
        )
    )
    return rows
