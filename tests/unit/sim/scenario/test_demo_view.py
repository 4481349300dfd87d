"""The demo's live view, rendered to text: what an on-call reader must be able to read off the screen, on a
terminal of 80x24."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from sim.scenario.engine import LiveState
from sim.scenario.orchestrator import JobView, NodeView
from sim.scenario.summary import ExpectationResult
from sim.scenario.view import LEGEND, MIN_TIMELINE_LINES, LiveView

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
RESULTS: dict[str, ExpectationResult | None] = {
    "XID 79 node tainted": HELD,
    "breaker tripped": MISSED,
    "no mass drain": None,
}


def render(
    nodes: list[NodeView],
    events: list[tuple[float, str]],
    job: JobView | None = JOB,
    results: dict[str, ExpectationResult | None] | None = None,
    size: tuple[int, int] = (80, 24),
) -> str:
    """One refresh of the live view, as the plain text a terminal of ``size`` would show."""
    output = StringIO()
    console = Console(file=output, width=size[0], height=size[1], force_terminal=False, color_system=None)
    view = LiveView("default", console)
    for at_s, text in events:
        view.event(at_s, text)
    state = LiveState(at_s=12.5, length_s=30.0, nodes=nodes, job=job, results=results or RESULTS, alerts=3)
    console.print(view.render(state))
    return output.getvalue()


def line_of(screen: str, needle: str) -> str:
    return next(line for line in screen.splitlines() if needle in line)


def test_every_node_is_shown_with_its_state_taint_cordon_and_pods() -> None:
    screen = render(NODES, [])
    for name, marks in (
        ("gpu-node-00", "H--  1"),
        ("gpu-node-01", "UTC  0"),
        ("gpu-node-02", "tTC  0"),
        ("gpu-node-03", "D--  1"),
        ("gpu-node-04", "QTC  0"),
        ("gpu-node-05", ".--  0"),
    ):
        assert f"{name} {marks}" in screen


def test_a_legend_says_what_each_mark_means() -> None:
    screen = render(NODES, [])
    for line in LEGEND:
        assert line in screen
    assert "H healthy" in screen and "T tainted, C cordoned" in screen and "workload pods" in screen


def test_the_header_gives_the_time_and_the_alerts_received() -> None:
    header = line_of(render(NODES, []), "default")
    assert "t= 12.5s / 30s" in header and "alerts: 3" in header


def test_the_training_job_shows_its_restarts_pods_and_nodes() -> None:
    job_line = line_of(render(NODES, []), "training job")
    assert "1 restart(s)" in job_line and "2/2 pods" in job_line
    assert "gpu-node-00, gpu-node-03" in job_line


def test_no_training_job_is_said_plainly() -> None:
    assert "training job: none" in render(NODES, [], job=None)


def test_the_newest_timeline_lines_fill_the_room_left() -> None:
    events = [(float(i), f"event number {i:02d}") for i in range(40)]
    screen = render(NODES, events)
    shown = [i for i in range(40) if f"event number {i:02d}" in screen]
    assert len(shown) >= MIN_TIMELINE_LINES
    assert shown == list(range(40 - len(shown), 40))  # the newest, in order
    assert "39.0s event number 39" in " ".join(line_of(screen, "event number 39").split())


def test_expectations_are_counted_and_the_failed_ones_named() -> None:
    screen = render(NODES, [])
    assert "expectations: 1 held, 1 failed, 1 pending" in screen
    assert "✗ breaker tripped" in screen


def test_the_view_fits_80_by_24_with_the_default_story() -> None:
    """16 nodes, a long timeline and twenty expectations (as the default scenario has) fit 80x24."""
    nodes = [NodeView(f"gpu-node-{i:02d}", "healthy", None, False, 1) for i in range(16)]
    events = [
        (float(i), f"PASS a rather long expectation name that goes on and on {i}" * 2) for i in range(50)
    ]
    results: dict[str, ExpectationResult | None] = {f"expectation {i}": HELD for i in range(20)}
    results |= {f"missed {i}": MISSED for i in range(5)}
    screen = render(nodes, events, results=results)
    lines = screen.splitlines()
    assert len(lines) <= 23, screen  # the line under it keeps the cursor
    assert max(len(line) for line in lines) <= 80, screen
    assert all(f"gpu-node-{i:02d}" in screen for i in range(16))
    assert "... and 2 more failed" in screen


def test_a_large_fleet_shows_counts_and_only_the_nodes_not_healthy() -> None:
    """More nodes than lines: a thousand healthy nodes become one count and the broken ones stay named."""
    healthy = [NodeView(f"gpu-node-{i:04d}", "healthy", None, False, 1) for i in range(1000)]
    screen = render([*healthy, *NODES[1:3]], [])
    assert "healthy: 1000" in screen and "unhealthy: 1" in screen and "testing: 1" in screen
    assert "gpu-node-0100" not in screen
    assert "gpu-node-01 " in screen and "gpu-node-02 " in screen
    assert len(screen.splitlines()) <= 23
