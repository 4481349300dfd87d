"""Replay scenarios: a recorded burst through a stricter and a looser policy, a profile change rolled out to
one node group, and a replay after an aggregator outage that never acts on stale history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.aggregator_api import Event
from gpuhealth.replay.engine import Candidate, CandidateError, replay
from gpuhealth.replay.history import History, HistoryNode

T0 = datetime(2026, 11, 3, 3, 10, tzinfo=UTC)
NODES = [f"node-{n}" for n in range(10)]


def finding(check: str, code: str, action: str, gpu: str = "GPU-0") -> dict[str, Any]:
    status = "fail" if action not in {"none", "restart_app"} else "warn"
    return {"check": check, "gpu": gpu, "status": status, "code": code, "message": code, "action": action}


class Rows:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def findings(
        self, at: datetime, node: str, found: list[dict[str, Any]], *, read_at: datetime | None = None
    ) -> None:
        details = {"findings": found, "reported_at": (read_at or at).isoformat()}
        self.events.append(
            Event(
                id=len(self.events) + 1,
                at=at,
                node=node,
                incident_id=None,
                kind="findings",
                message="f",
                details=details,
            )
        )

    def xid_79(self, at: datetime, node: str, lasts: timedelta = timedelta(hours=1)) -> None:
        """XID 79 read once, the GPU lost until the node is repaired."""
        self.findings(at, node, [finding("xid", "XID_79", "reboot")])
        self.findings(at + timedelta(seconds=10), node, [finding("presence", "GPU_LOST", "reboot")])
        self.findings(at + lasts, node, [])

    def history(self, profiles: dict[str, str] | None = None) -> History:
        profiles = profiles or {}
        nodes = [
            HistoryNode(name=name, gpu_count=8, interval_s=10, profile=profiles.get(name)) for name in NODES
        ]
        events = sorted(self.events, key=lambda e: (e.at, e.id))
        return History(
            exported_at=T0 + timedelta(days=1),
            since=T0 - timedelta(hours=1),
            until=T0 + timedelta(days=1),
            nodes=nodes,
            events=events,
        )


def burst() -> History:
    """Four nodes lose a GPU within two minutes at 03:10 (the shape of a bad driver roll-out)."""
    rows = Rows()
    for number in range(4):
        rows.xid_79(T0 + timedelta(seconds=30 * number), f"node-{number}")
    return rows.history()


def candidate(**data: Any) -> Candidate:
    return Candidate.from_mapping(data, "candidate.yaml")


DRAIN = {"policy": {"cordon": True, "drain": True}}


def test_a_burst_through_a_strict_breaker_drains_two_then_trips_at_the_third() -> None:
    """Breaker at 20 % of 10 nodes (min 3): node-0 and node-1 drained, node-2 trips it, node-2 and node-3
    are refused for as long as their incidents stay open."""
    strict = candidate(
        **DRAIN, fleet={"breaker_threshold_percent": 20, "breaker_min_nodes": 3, "budget_max_percent": 100}
    )
    result = replay(burst(), strict)
    by_node = {node.node: node.would for node in result.nodes}
    assert [by_node[f"node-{n}"].drains for n in range(4)] == [1, 1, 0, 0]
    assert result.would.taints == result.would.cordons == 4
    assert result.would.drains == result.would.requeues == 2
    assert result.would.breaker_trips == 1
    assert result.breaker_trips[0].startswith("2026-11-03T03:11:00")
    assert "3 of 10 GPU nodes (30 %) turned unhealthy" in result.breaker_trips[0]
    assert by_node["node-2"].budget_refusals >= 1 and by_node["node-3"].budget_refusals >= 1


def test_a_burst_within_the_settle_wait_trips_the_breaker_before_any_drain() -> None:
    """The same four nodes failing within 6 s: each first permit waits 15 s (the default), the third
    report trips the breaker meanwhile, and no node is drained; without the wait the first two are."""
    rows = Rows()
    for number in range(4):
        rows.xid_79(T0 + timedelta(seconds=2 * number), f"node-{number}")
    fleet = {"breaker_threshold_percent": 20, "breaker_min_nodes": 3, "budget_max_percent": 100}
    settled = replay(rows.history(), candidate(**DRAIN, fleet=fleet))
    assert (settled.would.drains, settled.would.breaker_trips) == (0, 1)
    hasty = replay(rows.history(), candidate(**DRAIN, fleet={**fleet, "permit_settle_s": 0}))
    assert (hasty.would.drains, hasty.would.breaker_trips) == (2, 1)


def test_the_same_burst_through_a_looser_breaker_drains_all_four_and_mark_only_writes_no_taint() -> None:
    loose = replay(
        burst(), candidate(**DRAIN, fleet={"breaker_threshold_percent": 50, "budget_max_percent": 100})
    )
    assert (loose.would.drains, loose.would.breaker_trips, loose.would.budget_refusals) == (4, 0, 0)
    # out of service from the XID to the close: 1 h of GPU loss, then 3 clean readings and 300 s of dwell
    assert loose.would.gpu_hours == pytest.approx(4 * 8 * (3600 + 300) / 3600, rel=0.01)
    mark = replay(burst(), candidate(policy={"taint": False}))
    assert (mark.would.taints, mark.would.cordons, mark.would.drains, mark.would.gpu_hours) == (0, 0, 0, 0.0)
    assert mark.incidents == 4


def test_the_same_input_gives_the_same_output() -> None:
    strict = candidate(**DRAIN, fleet={"breaker_threshold_percent": 20})
    assert replay(burst(), strict).as_dict() == replay(burst(), strict).as_dict()


def test_xid_overrides_and_debounce_of_the_candidate_are_what_the_replay_judges_with() -> None:
    """XID 79 muted (action none) and the lost GPU only after 50 readings: nothing opens."""
    rows = Rows()
    rows.findings(T0, "node-0", [finding("xid", "XID_79", "reboot")])
    rows.findings(T0 + timedelta(seconds=10), "node-0", [])
    quiet = candidate(checks={"xid": {"overrides": {79: "none"}}})
    assert replay(rows.history(), quiet).incidents == 0
    assert replay(rows.history(), candidate()).incidents == 1


def test_a_profile_change_rolled_out_to_one_group_leaves_the_other_groups_untouched() -> None:
    rows = Rows()
    for number in (0, 1, 5, 6):
        rows.xid_79(T0 + timedelta(hours=number), f"node-{number}")
    groups = {name: "canary" if name in {"node-0", "node-1"} else "main" for name in NODES}
    history = rows.history(groups)
    before = {
        "profiles": {
            "definitions": {
                "canary": {"mode": "quarantine", "match": {"labels": {"group": "canary"}}},
                "main": {"mode": "quarantine", "match": {"labels": {"group": "main"}}},
            }
        }
    }
    after = {"profiles": {"definitions": {**before["profiles"]["definitions"]}}}
    after["profiles"]["definitions"]["canary"] = {"mode": "drain", "match": {"labels": {"group": "canary"}}}
    old, new = replay(history, candidate(**before)), replay(history, candidate(**after))
    old_nodes = {n.node: n for n in old.nodes}
    new_nodes = {n.node: n for n in new.nodes}
    for name in NODES:
        if groups[name] == "main":
            assert new_nodes[name].would == old_nodes[name].would, name
            assert [i.steps for i in new_nodes[name].would_incidents] == [
                i.steps for i in old_nodes[name].would_incidents
            ]
    assert [new_nodes[n].would.drains for n in ("node-0", "node-1")] == [1, 1]
    assert [old_nodes[n].would.drains for n in ("node-0", "node-1")] == [0, 0]
    assert new_nodes["node-0"].profile == "canary" and new_nodes["node-5"].profile == "main"


def test_after_an_aggregator_outage_stale_rows_are_shown_and_never_acted_on() -> None:
    """The NVSentinel#1261 failure mode: an outbox flushed after a 2-hour outage delivers findings read long
    ago; the replay lists them and takes no action on them. A fresh fault after the outage still acts."""
    rows = Rows()
    back = T0 + timedelta(hours=2)
    rows.findings(back, "node-3", [finding("xid", "XID_79", "reboot")], read_at=T0)
    rows.findings(back + timedelta(seconds=1), "node-3", [], read_at=T0 + timedelta(seconds=10))
    rows.xid_79(back + timedelta(minutes=10), "node-4")
    result = replay(rows.history(), candidate(**DRAIN))
    by_node = {node.node: node for node in result.nodes}
    assert by_node["node-3"].would_incidents == [] and by_node["node-3"].would.taints == 0
    assert len(result.stale) == 2
    assert result.stale[0].startswith(
        "node-3: findings read at 2026-11-03T03:10:00+00:00 arrived 7200 s late"
    )
    assert "not acted on" in result.stale[0]
    assert by_node["node-4"].would.drains == 1


def test_gaps_say_where_the_history_cannot_support_an_exact_replay() -> None:
    rows = Rows()
    rows.findings(T0, "node-1", [])  # clears findings raised before the window
    rows.events.append(
        Event(id=99, at=T0, node="node-2", incident_id=None, kind="findings", message="f", details={})
    )
    result = replay(rows.history(), candidate())
    assert any(gap.startswith("node-1: findings cleared at") for gap in result.gaps)
    assert "node-2: 1 findings row(s) of an older format (no findings recorded)" in result.gaps


def test_a_candidate_with_an_unknown_key_is_refused_in_one_line() -> None:
    with pytest.raises(
        CandidateError, match=r"^candidate.yaml: policy.drian: Extra inputs are not permitted$"
    ):
        candidate(policy={"drian": True})
    with pytest.raises(CandidateError, match=r"^candidate.yaml: fleet.budget_max: "):
        candidate(fleet={"budget_max": 3})


def test_a_replay_sets_the_recorded_shadow_decisions_beside_its_own() -> None:
    """A canary ran in shadow (drain, writing nothing) and recorded "would have drained"; the replay of the
    same profile decides the same drain, and shows both."""
    rows = Rows()
    rows.xid_79(T0, "node-0")
    for action in ("taint", "cordon", "drain"):
        rows.events.append(
            Event(
                id=100 + len(rows.events),
                at=T0,
                node="node-0",
                incident_id=None,
                kind="shadow",
                message=f"would have {action}ed node-0",
                details={"action": action, "result": "shadow"},
            )
        )
    profiles = {"definitions": {"canary": {"mode": "drain", "match": {"labels": {"g": "c"}}, "shadow": True}}}
    result = replay(rows.history({"node-0": "canary"}), candidate(profiles=profiles))
    assert (result.shadow.taints, result.shadow.cordons, result.shadow.drains) == (1, 1, 1)
    assert (result.would.taints, result.would.cordons, result.would.drains) == (1, 1, 1)
    assert result.did.taints == 0


def test_a_remediate_profile_resets_or_reboots_after_the_drain_and_releases_the_node() -> None:
    """XID 79 -> drain then reboot; a pending row remap -> drain then reset; both validated and released
    (the replay takes what it cannot know as going well), never escalated to replace."""
    rows = Rows()
    rows.xid_79(T0, "node-0")
    rows.findings(T0 + timedelta(hours=3), "node-1", [finding("row_remap", "ROW_REMAP_PENDING", "reset_gpu")])
    rows.findings(T0 + timedelta(hours=4), "node-1", [])
    remediate = {
        "definitions": {"all": {"mode": "remediate", "match": {"labels": {"a": "b"}}}},
        "default": "all",
    }
    result = replay(rows.history(), candidate(profiles=remediate, fleet={"budget_max_percent": 100}))
    assert (result.would.drains, result.would.reboots, result.would.resets) == (2, 1, 1)
    lines = {node.node: node.would_incidents for node in result.nodes if node.would_incidents}
    assert [step.split(" ")[0] for step in lines["node-0"][0].steps] == ["taint", "cordon", "drain", "reboot"]
    assert [step.split(" ")[0] for step in lines["node-1"][0].steps] == ["taint", "cordon", "drain", "reset"]
    assert all("RECOVERY_FAILED" not in line.reasons for found in lines.values() for line in found)
    assert result.would.gpu_hours < 1.0  # released after validation, long before the recorded repair
