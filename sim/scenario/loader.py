"""Scenario files -> :class:`~sim.scenario.model.Scenario`; every problem is one line naming the field."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sim.scenario.model import Scenario

SHIPPED_PACKAGE = "sim.scenarios"
DEFAULT_SCENARIO = "default"


class ScenarioError(ValueError):
    """An unreadable or invalid scenario; ``str()`` is one line: file, field path, problem."""


def shipped_scenarios() -> dict[str, Path]:
    """Name -> file of every scenario shipped with the package (``sim/scenarios/*.yaml``)."""
    folder = resources.files(SHIPPED_PACKAGE)
    return {
        Path(entry.name).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".yaml")
    }


def shipped_scenario(name: str = DEFAULT_SCENARIO) -> Path:
    """The file of one shipped scenario."""
    found = shipped_scenarios().get(name)
    if found is None:
        known = ", ".join(sorted(shipped_scenarios()))
        raise ScenarioError(f"no shipped scenario named {name!r} (shipped: {known})")
    return found


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file. Raises ScenarioError (one line) for any problem."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{where}: cannot read: {exc.strerror or exc}") from None
    return parse_scenario(text, where)


def parse_scenario(text: str, where: str = "<scenario>") -> Scenario:
    """Validate a scenario given as YAML text; ``where`` names it in errors."""
    data = _yaml(text, where)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {_first_problem(exc)}") from None


def _yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ScenarioError(f"{where}: not valid YAML{position}: {problem}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: the top level must be a mapping, not {type(data).__name__}")
    return data


def _first_problem(exc: ValidationError) -> str:
    """``field.path: message`` of the first error, with the discriminator tags pydantic adds left out."""
    errors = exc.errors()
    first = errors[0]
    path = _field_path(first["loc"])
    message = " ".join(str(first["msg"]).removeprefix("Value error, ").split())
    if first["type"] == "union_tag_invalid":
        context = first.get("ctx") or {}
        message = f"unknown kind {context.get('tag')!r} (expected one of {context.get('expected_tags')})"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{path or '(top level)'}: {message}{more}"


def _field_path(location: tuple[int | str, ...]) -> str:
    """``timeline[2].fault.xid`` from pydantic's location, the discriminated unions' tags left out."""
    parts: list[str] = []
    previous: list[int | str] = []
    for part in location:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif not _is_union_tag(previous):
            parts.append(f".{part}" if parts else part)
        previous.append(part)
    return "".join(parts)


def _is_union_tag(previous: list[int | str]) -> bool:
    """Pydantic puts the tag after ``fault`` and after ``expectations[i]``; neither is a field of the file."""
    if previous and previous[-1] == "fault":
        return True
    return len(previous) >= 2 and isinstance(previous[-1], int) and previous[-2] == "expectations"
