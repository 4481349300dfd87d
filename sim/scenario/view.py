"""How a run is shown: a rich live view (fleet, training job, timeline, expectations), or progress lines
only (``--headless``)."""

from __future__ import annotations

import sys
from collections import Counter
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from sim.scenario.engine import LiveState
from sim.scenario.orchestrator import NodeView
from sim.scenario.summary import FLEET_PAGE_PREFIX, RunSummary

STATE_STYLE = {
    "healthy": "green",
    "degraded": "yellow",
    "unhealthy": "bold red",
    "quarantined": "magenta",
    "unknown": "dim",
    "testing": "cyan",
}
GRID_LIMIT = 64  # larger fleets show counts and the nodes that are not healthy
TIMELINE_LINES = 12


class ProgressLines:
    """``--headless``: one progress line per step on stderr; no live view."""

    live = False

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stderr, highlight=False)

    def progress(self, text: str) -> None:
        # soft_wrap: a long line (the fleet page's address) stays one line a terminal can copy as a link
        self.console.print(f"[dim]demo:[/dim] {text}", soft_wrap=True)

    def event(self, at_s: float, text: str) -> None:
        self.console.print(f"[dim]{at_s:6.1f}s[/dim] {text}")

    def refresh(self, state: LiveState) -> None:
        return


class LiveView:
    """The live view, on a terminal: refreshed by the engine while the timeline plays."""

    live = True

    def __init__(self, scenario: str, console: Console | None = None) -> None:
        self.scenario = scenario
        self.console = console or Console()
        self._events: list[tuple[float, str]] = []
        self._page: str | None = None  # the fleet page's address, kept on screen for the whole run
        self._live = Live(console=self.console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._live.stop()

    def progress(self, text: str) -> None:
        if text.startswith(FLEET_PAGE_PREFIX):
            self._page = text.removeprefix(FLEET_PAGE_PREFIX)
        self._live.update(Text(f"demo: {text}"), refresh=True)

    def event(self, at_s: float, text: str) -> None:
        self._events.append((at_s, text))

    def refresh(self, state: LiveState) -> None:
        header = Text(
            f"{self.scenario}  t={state.at_s:5.1f}s / {state.length_s:.0f}s  alerts received: {state.alerts}"
        )
        page = Text(f"fleet page: {self._page}", style="dim") if self._page else Text("")
        body = Group(
            header, page, self._fleet(state.nodes), self._job(state), self._timeline(), self._results(state)
        )
        self._live.update(Panel(body, title="gpuhealth demo"), refresh=True)

    def _fleet(self, nodes: list[NodeView]) -> Table:
        table = Table(title="fleet", show_header=False, box=None, padding=(0, 1))
        if len(nodes) > GRID_LIMIT:
            counts = Counter(node.state or "unset" for node in nodes)
            table.add_row(", ".join(f"{state}: {count}" for state, count in sorted(counts.items())))
            nodes = [node for node in nodes if node.state not in (None, "healthy")][:GRID_LIMIT]
        columns = 4
        cells = [self._cell(node) for node in nodes]
        for start in range(0, len(cells), columns):
            table.add_row(*cells[start : start + columns])
        return table

    @staticmethod
    def _cell(node: NodeView) -> Text:
        state = node.state or "unset"
        marks = ("T" if node.taint is not None else "-") + ("C" if node.cordoned else "-")
        text = Text(f"{node.name} ", style=STATE_STYLE.get(state, ""))
        text.append(f"{state[:9]:<9} {marks} pods:{node.workload_pods}", style=STATE_STYLE.get(state, ""))
        return text

    @staticmethod
    def _job(state: LiveState) -> Text:
        job = state.job
        if job is None:
            return Text("training job: none")
        where = ", ".join(job.running_nodes) or "nothing running"
        running = f"{len(job.running_nodes)}/{job.expected_pods} pods"
        return Text(f"training job: {job.restarts} restart(s); {running} Running on {where}")

    def _timeline(self) -> Table:
        table = Table(title="timeline", show_header=False, box=None, padding=(0, 1))
        for at_s, text in self._events[-TIMELINE_LINES:]:
            style = "green" if text.startswith("PASS") else "red" if text.startswith("FAIL") else ""
            table.add_row(f"{at_s:6.1f}s", Text(text, style=style))
        return table

    @staticmethod
    def _results(state: LiveState) -> Table:
        table = Table(show_header=False, box=None, padding=(0, 1))
        table.add_row("", Text("expectations", style="bold"), "")
        for name, result in state.results.items():
            mark = "…" if result is None else ("[green]✓[/green]" if result.passed else "[red]✗[/red]")
            table.add_row(mark, name, result.observed if result is not None else "")
        return table


def print_summary(summary: RunSummary, console: Console) -> None:
    """The end-of-run table: every expectation, then the latencies and durations."""
    table = Table(title=f"scenario {summary.scenario!r} on {summary.nodes} nodes")
    for column in ("", "expectation", "expected", "observed"):
        table.add_column(column, overflow="fold")
    for result in summary.expectations:
        mark = "[green]✓[/green]" if result.passed else "[red]✗[/red]"
        table.add_row(mark, result.name, result.expected, result.observed)
    console.print(table)
    latency = summary.fault_to_taint_summary
    if latency.samples:
        console.print(
            f"fault to taint: p50 {latency.p50_s} s, p99 {latency.p99_s} s over {latency.samples} fault(s)"
        )
    held = sum(r.passed for r in summary.expectations)
    verdict = "[green]all expectations held[/green]" if summary.passed else "[red]expectations failed[/red]"
    console.print(
        f"{held}/{len(summary.expectations)} {verdict} "
        f"(start-up {summary.durations.startup_s} s, timeline {summary.durations.timeline_s} s)"
    )
