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


STATE_CODE = {
    "healthy": "H",
    "degraded": "D",
    "unhealthy": "U",
    "quarantined": "Q",
    "testing": "t",
    "unknown": "?",
}
LEGEND = (
    "H healthy D degraded U unhealthy Q quarantined t testing ? unknown . unset",
    "then T tainted, C cordoned (- not), and the node's workload pods",
)
MIN_TIMELINE_LINES = 3
FAILED_SHOWN = 3  # expectations that failed, by name; the rest are counted


class LiveView:
    """The live view, on a terminal: refreshed by the engine while the timeline plays. It fits the terminal
    (80x24 at least): one cell per node with a legend for its marks, as many timeline lines as there is
    room for, and the expectations counted (those that failed named)."""

    live = True

    def __init__(self, scenario: str, console: Console | None = None) -> None:
        self.scenario = scenario
        self.console = console or Console()
        self._events: list[tuple[float, str]] = []
        self._live = Live(console=self.console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._live.stop()

    def progress(self, text: str) -> None:
        if text.startswith(FLEET_PAGE_PREFIX) or "GPUHEALTH_TOKEN=" in text or "stays up" in text:
            # Above the view, where it stays to be copied whole (it is wider than a terminal's line).
            self.console.print(f"demo: {text}", soft_wrap=True, highlight=False)
            return
        self._live.update(Text(f"demo: {text}"), refresh=True)

    def event(self, at_s: float, text: str) -> None:
        self._events.append((at_s, text))

    def refresh(self, state: LiveState) -> None:
        self._live.update(self.render(state), refresh=True)

    def render(self, state: LiveState) -> Panel:
        """The whole view for the console's size."""
        width, height = self.console.size
        inner = max(20, width - 4)
        header = Text(
            f"{self.scenario}  t={state.at_s:5.1f}s / {state.length_s:.0f}s  alerts: {state.alerts}",
            no_wrap=True,
            overflow="ellipsis",
        )
        legend = [Text(line, style="dim", no_wrap=True, overflow="ellipsis") for line in LEGEND]
        failed = [name for name, result in state.results.items() if result is not None and not result.passed]
        results = self._results(state, failed)
        fixed = 2 + 1 + len(legend) + 1 + len(results)  # borders, header, legend, job, expectations
        room = max(1, height - 1 - fixed)  # the line under the view keeps the cursor
        fleet = self._fleet(state.nodes, inner, max(1, room - MIN_TIMELINE_LINES))
        timeline = self._timeline(max(MIN_TIMELINE_LINES, room - len(fleet)))
        body = Group(header, *legend, *fleet, self._job(state), *timeline, *results)
        return Panel(body, title="gpuhealth demo", width=min(width, inner + 4))

    def _fleet(self, nodes: list[NodeView], width: int, rows: int) -> list[Text]:
        """One cell per node, as many per line as fit; too many nodes for ``rows``: counts, then the nodes
        that are not healthy."""
        lines: list[Text] = []
        if not nodes:
            return lines
        name_width = max(len(node.name) for node in nodes)
        per_line = max(1, (width + 1) // (name_width + 8))
        if -(-len(nodes) // per_line) > rows:
            counts = Counter(node.state or "unset" for node in nodes)
            lines.append(
                Text(
                    ", ".join(f"{state}: {count}" for state, count in sorted(counts.items())),
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
            nodes = [node for node in nodes if node.state not in (None, "healthy")]
            nodes = nodes[: max(0, rows - 1) * per_line]
        for start in range(0, len(nodes), per_line):
            line = Text(no_wrap=True, overflow="ellipsis")
            for node in nodes[start : start + per_line]:
                line.append_text(self._cell(node, name_width))
                line.append(" ")
            lines.append(line)
        return lines

    @staticmethod
    def _cell(node: NodeView, name_width: int) -> Text:
        state = node.state or "unset"
        marks = STATE_CODE.get(state, ".")
        marks += ("T" if node.taint is not None else "-") + ("C" if node.cordoned else "-")
        style = STATE_STYLE.get(state, "")
        return Text(f"{node.name:<{name_width}} {marks}{node.workload_pods:>3}", style=style)

    @staticmethod
    def _job(state: LiveState) -> Text:
        job = state.job
        if job is None:
            return Text("training job: none")
        where = ", ".join(job.running_nodes) or "nothing running"
        running = f"{len(job.running_nodes)}/{job.expected_pods} pods"
        text = f"training job: {job.restarts} restart(s); {running} Running on {where}"
        return Text(text, no_wrap=True, overflow="ellipsis")

    def _timeline(self, lines: int) -> list[Text]:
        shown = []
        for at_s, text in self._events[-lines:]:
            style = "green" if text.startswith("PASS") else "red" if text.startswith("FAIL") else ""
            line = Text(f"{at_s:6.1f}s ", style="dim", no_wrap=True, overflow="ellipsis")
            line.append(text, style=style)
            shown.append(line)
        return shown

    @staticmethod
    def _results(state: LiveState, failed: list[str]) -> list[Text]:
        decided = [result for result in state.results.values() if result is not None]
        held = sum(result.passed for result in decided)
        pending = len(state.results) - len(decided)
        head = Text("expectations: ", style="bold", no_wrap=True, overflow="ellipsis")
        head.append(f"{held} held", style="green")
        head.append(", ")
        head.append(f"{len(failed)} failed", style="red" if failed else "")
        head.append(f", {pending} pending")
        lines = [head]
        for name in failed[:FAILED_SHOWN]:
            lines.append(Text(f"  ✗ {name}", style="red", no_wrap=True, overflow="ellipsis"))
        if len(failed) > FAILED_SHOWN:
            lines.append(Text(f"  ... and {len(failed) - FAILED_SHOWN} more failed", style="red"))
        return lines


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
