"""A scenario observer for tests (import it as ``recording_observer``): keeps every progress and timeline
line (shown when a run fails) and draws nothing."""

from __future__ import annotations

from sim.scenario.engine import LiveState


class RecordingObserver:
    live = False

    def __init__(self) -> None:
        self.lines: list[str] = []

    def progress(self, text: str) -> None:
        self.lines.append(text)

    def event(self, at_s: float, text: str) -> None:
        self.lines.append(f"{at_s:5.1f}s {text}")

    def refresh(self, state: LiveState) -> None:
        return
