"""`gpuhealth demo --cluster real`: the shipped default scenario played by the scenario engine on the real
stack (kube-apiserver, kube-controller-manager, kube-scheduler, KWOK GPU nodes and the real JobSet manager)
with the same expectations as on the emulator.

The engine starts a control plane of its own (``sim.scenario.real_orchestrator``), not the session's, and
stops it at the end. Without the binaries the test skips with the one line the demo prints (fails in CI).
"""

from __future__ import annotations

import os

import pytest
from recording_observer import RecordingObserver

from sim.realkube.control_plane import ControlPlaneUnavailable
from sim.scenario.engine import run_scenario
from sim.scenario.loader import load_scenario, shipped_scenario
from sim.scenario.real_orchestrator import check_real_playable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_the_default_scenario_plays_on_the_real_stack_and_every_expectation_holds() -> None:
    """All twenty expectations of the default story on 16 KWOK GPU nodes: XID 79 tainted, drained by the
    central remediator through the real Eviction API (the real disruption controller's PDB), the real JobSet
    restarted by the suspend toggle and placed by kube-scheduler on untainted nodes, the reboot and the
    release; XID 13 left in service; the row remap reset; the flapping thermal signal ignored; the burst
    tripping the breaker with no mass drain; the alerts delivered."""
    scenario = load_scenario(shipped_scenario())
    try:
        check_real_playable(scenario)
    except ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    observer = RecordingObserver()

    summary = run_scenario(scenario, observer, cluster="real")

    story = "\n".join(observer.lines)
    assert summary.cluster == "real" and summary.orchestrator == "kubernetes", story
    assert any("real Kubernetes stack" in line for line in observer.lines), story
    failed = [f"{r.name}: {r.observed}" for r in summary.expectations if not r.passed]
    assert failed == [], story
    assert summary.passed and len(summary.expectations) == len(scenario.expectations)
    print(
        f"default on the real stack: start-up {summary.durations.startup_s} s, timeline "
        f"{summary.durations.timeline_s} s, fault to taint p99 {summary.fault_to_taint_summary.p99_s} s"
    )
