"""Human-readable output: verdict tables with colour (rich), plain when not a terminal or NO_COLOR is set."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.findings import Status, Verdict

STATUS_STYLE = {Status.OK: "green", Status.UNKNOWN: "magenta", Status.WARN: "yellow", Status.FAIL: "bold red"}


def status_text(status: Status) -> Text:
    return Text(status.value.upper(), style=STATUS_STYLE[status])


def print_verdict(
    verdict: Verdict,
    console: Console,
    gpu_index: dict[str, int] | None = None,
    *,
    now: datetime | None = None,
) -> None:
    """A headline (node, status, action) and one table row per finding; an unknown one with its age."""
    at = now if now is not None else datetime.now(UTC)
    headline = Text.assemble(
        ("node ", ""),
        (verdict.node, "bold"),
        (": ", ""),
        status_text(verdict.status),
        (f"  action: {verdict.action.value}", ""),
    )
    console.print(headline)
    if not verdict.findings:
        console.print("no findings: every check passed")
        return
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for column in ("GPU", "STATUS", "CODE", "ACTION", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for finding in verdict.findings:
        table.add_row(
            _gpu_label(finding.gpu, gpu_index or {}),
            status_text(finding.status),
            finding.code,
            finding.action.value,
            finding.shown(at),
        )
    console.print(table)


def _gpu_label(uuid: str | None, gpu_index: dict[str, int]) -> str:
    if uuid is None:
        return "node"
    index = gpu_index.get(uuid)
    short = uuid if len(uuid) <= 16 else uuid[:12] + "…"
    return f"{index} {short}" if index is not None else short
