"""The invariant checker itself: a clean history passes, and each promise, broken on its own, is named."""

from __future__ import annotations

from fault_invariants import (
    INVARIANTS,
    Ack,
    History,
    NodeSample,
    ReceivedAlert,
    StoredAlert,
    StoredNode,
    check,
    held,
)


def clean() -> History:
    """One broken node (gpu-0, tainted then cordoned, kept), one healthy (gpu-1), one alert delivered twice."""
    return History(
        acks=[
            Ack("gpu-0", "e1", 1, True, None),
            Ack("gpu-0", "e1", 2, True, "inc-1"),
            Ack("gpu-0", "e1", 2, False, "inc-1"),  # a retry of an accepted one
            Ack("gpu-1", "e9", 5, True, None),
        ],
        nodes={"gpu-0": StoredNode("gpu-0", "e1", 2), "gpu-1": StoredNode("gpu-1", "e9", 7)},
        incidents={"inc-1": "gpu-0"},
        alerts=[StoredAlert("k1", "node_unhealthy", "firing", "gpu-0", "inc-1", ("receiver",))],
        received=[ReceivedAlert("k1", "node_unhealthy", "firing", "gpu-0", "inc-1")] * 2,
        samples={
            "gpu-0": [NodeSample(0, False, False), NodeSample(1, True, False), NodeSample(2, True, True)],
            "gpu-1": [NodeSample(0, False, False)],
        },
        restarts={"train/llm": 1},
        broken={"gpu-0"},
        healed_at=10.0,
        steady_at=12.0,
        steady_within_s=5.0,
    )


def names(history: History) -> set[str]:
    return {violation.invariant for violation in check(history)}


def test_a_clean_history_holds_every_promise() -> None:
    assert check(clean()) == []
    assert held([]) == dict.fromkeys(INVARIANTS, True)


def test_an_acknowledged_report_missing_from_the_store_is_named() -> None:
    history = clean()
    history.nodes["gpu-0"] = StoredNode("gpu-0", "e1", 1)
    assert names(history) == {"acked_reports_stored"}
    history.nodes["gpu-0"] = StoredNode("gpu-0", "e2", 1)  # a newer epoch took over: not a loss
    assert names(history) == set()
    del history.nodes["gpu-1"]
    assert names(history) == {"acked_reports_stored"}


def test_a_lost_incident_is_named() -> None:
    history = clean()
    history.incidents = {}
    assert "incidents_kept" in names(history)


def test_an_alert_never_received_and_one_raised_twice_are_named() -> None:
    history = clean()
    history.received = []
    assert names(history) == {"alerts_delivered"}
    history = clean()
    history.alerts.append(StoredAlert("k2", "node_unhealthy", "firing", "gpu-0", "inc-1", ("receiver",)))
    history.received.append(ReceivedAlert("k2", "node_unhealthy", "firing", "gpu-0", "inc-1"))
    assert names(history) == {"alerts_shown_once"}
    history = clean()
    history.received.append(ReceivedAlert("phantom", "node_unhealthy", "firing", "gpu-0", "inc-1"))
    assert names(history) == {"alerts_shown_once"}


def test_a_second_restart_for_one_incident_is_named() -> None:
    history = clean()
    history.restarts["train/llm"] = 2
    assert names(history) == {"one_restart_per_incident"}


def test_a_healthy_node_tainted_or_cordoned_is_named() -> None:
    history = clean()
    history.samples["gpu-1"].append(NodeSample(3, False, True))
    assert names(history) == {"healthy_untouched"}


def test_a_quarantine_lifted_is_named() -> None:
    history = clean()
    history.samples["gpu-0"].append(NodeSample(3, False, True))
    assert names(history) == {"quarantine_kept"}


def test_a_fleet_late_or_never_steady_is_named() -> None:
    history = clean()
    history.steady_at = 16.0
    assert names(history) == {"steady_in_time"}
    history.steady_at = None
    assert names(history) == {"steady_in_time"}
