"""The demo's live view, rendered to text: what an on-call reader must be able to read off the screen."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from sim.scenario.engine import LiveState
from sim.scenario.orchestrator import JobView, NodeView
from sim.scenario.summary import ExpectationResult
from sim.scenario.view import GRID_LIMIT, TIMELINE_LINES, LiveView

NODES = [
    NodeView("gpu-node-00", "healthy", None, cordoned=False, workload_pods=1),
    NodeView("gpu-node-01", "unhealthy", "reboot", cordoned=True, workload_pods=0),
    NodeView("gpu-node-02", "testing", "reset_gpu", cordoned=True, workload_pods=0),
    NodeView("gpu-node-03", "degraded", None, cordoned=False, workload_pods=1),
    NodeView("gpu-node-04", "quarantined", "replace", cordoned=True, workload_pods=0),
    NodeView("gpu-node-05", None, None, cordoned=False, workload_pods=0),
]
JOB = JobView(restarts=1, running_nodes=("gpu-node-00", "gpu-node-03"), expected_pods=2)
HELD = ExpectationResult(name="XID 79 node tainted", expected="taint", observed="tainted reboot", passed=True)
MISSED = ExpectationResult(name="breaker tripped", expected="tripped", observed="closed", passed=False)


def render(nodes: list[NodeView], events: list[tuple[float, str]], job: JobView | None = JOB) -> str:
    """One refresh of the live view, as the plain text a terminal would show."""
    output = StringIO()
    console = Console(file=output, width=160, force_terminal=False, color_system=None)
    view = LiveView("default", console)
    with view:
        for at_s, text in events:
            view.event(at_s, text)
        view.refresh(
            LiveState(
                at_s=12.5,
                length_s=30.0,
                nodes=nodes,
                job=job,
                results={"XID 79 node tainted": HELD, "breaker tripped": MISSED, "no mass drain": None},
                alerts=3,
            )
        )
    return output.getvalue()


def line_of(screen: str, needle: str) -> str:
    return next(line for line in screen.splitlines() if needle in line)


def test_every_node_is_shown_with_its_state_taint_and_cordon() -> None:
    screen = render(NODES, [])
    assert "unhealthy" in line_of(screen, "gpu-node-01") and "TC" in line_of(screen, "gpu-node-01")
    assert "testing" in line_of(screen, "gpu-node-02")
    assert "quarantin" in line_of(screen, "gpu-node-04")
    assert "unset" in line_of(screen, "gpu-node-05")
    for name, state in (("gpu-node-00", "healthy"), ("gpu-node-03", "degraded")):
        assert f"{name} {state}" in screen
    assert "gpu-node-00 healthy   -- pods:1" in screen


def test_the_header_gives_the_time_and_the_alerts_received() -> None:
    header = line_of(render(NODES, []), "default")
    assert "t= 12.5s / 30s" in header and "alerts received: 3" in header


def test_the_training_job_shows_its_restarts_pods_and_nodes() -> None:
    job_line = line_of(render(NODES, []), "training job")
    assert "1 restart(s)" in job_line and "2/2 pods" in job_line
    assert "gpu-node-00, gpu-node-03" in job_line


def test_no_training_job_is_said_plainly() -> None:
    assert "training job: none" in render(NODES, [], job=None)


def test_only_the_last_timeline_lines_are_shown() -> None:
    events = [(float(i), f"event number {i:02d}") for i in range(TIMELINE_LINES + 5)]
    screen = render(NODES, events)
    assert "event number 04" not in screen
    shown = [f"event number {i:02d}" for i in range(5, TIMELINE_LINES + 5)]
    assert all(text in screen for text in shown)
    assert "16.0s event number 16" in " ".join(line_of(screen, "event number 16").split())


def test_expectations_show_held_failed_and_pending() -> None:
    screen = render(NODES, [])
    assert "✓" in line_of(screen, "XID 79 node tainted") and "tainted reboot" in screen
    assert "✗" in line_of(screen, "breaker tripped") and "closed" in line_of(screen, "breaker tripped")
    assert "…" in line_of(screen, "no mass drain")


def test_a_large_fleet_shows_counts_and_only_the_nodes_not_healthy() -> None:
    """Beyond the grid limit, a thousand healthy nodes become one count and the broken ones stay named."""
    healthy = [NodeView(f"gpu-node-{i:03d}", "healthy", None, False, 1) for i in range(100, 100 + GRID_LIMIT)]
    screen = render([*healthy, *NODES[1:3]], [])
    assert f"healthy: {GRID_LIMIT}" in screen and "unhealthy: 1" in screen and "testing: 1" in screen
    assert "gpu-node-100" not in screen
    assert "gpu-node-01" in screen and "gpu-node-02" in screen
