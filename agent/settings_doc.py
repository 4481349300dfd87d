"""Generate the configuration reference of docs/agent.md from :class:`agent.settings.AgentSettings`.

The block between ``<!-- BEGIN GENERATED: agent-settings -->`` and ``<!-- END GENERATED: agent-settings -->``
is rewritten from the model, so the document cannot drift from the code; the rest is hand-written.
``python -m agent.settings_doc`` rewrites the file, ``--check`` reports whether it is in sync (exit 1 when
not), and a test does the same check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, AgentSettings

DEFAULT_DOC = Path("docs/agent.md")
BLOCK_NAME = "agent-settings"
_NOT_EXPANDED = frozenset({"checks"})  # documented field by field in docs/checks.md


class DocError(ValueError):
    """The document lacks the generated block's markers."""


def settings_table() -> str:
    """Every settings key, its environment variable, default and meaning: one Markdown row each."""
    lines = ["| Key | Environment variable | Default | Meaning |", "|---|---|---|---|"]
    for key, default, description in _rows(AgentSettings, _defaults(), ()):
        env = ENV_PREFIX + ENV_NESTED_DELIMITER.join(part.upper() for part in key)
        dotted = ".".join(key)
        lines.append(f"| `{dotted}` | `{env}` | `{default}` | {_cell(description)} |")
    return "\n".join(lines)


def _defaults() -> dict[str, Any]:
    # node_name's default depends on the machine: document the rule, not this machine's hostname.
    return {"node_name": "$NODE_NAME or hostname"}


def _rows(
    model: type[BaseModel], overrides: dict[str, Any], prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], str, str]]:
    for name, field in model.model_fields.items():
        key = (*prefix, name)
        annotation = field.annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and name not in _NOT_EXPANDED:
            yield from _rows(annotation, {}, key)
            continue
        if name in overrides:
            default = str(overrides[name])
        elif nested:
            default = "see docs/checks.md"
        else:
            default = _render(field.get_default(call_default_factory=True))
        yield key, default, field.description or ""


def _render(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset | set):
        return "[" + ", ".join(sorted(str(item) for item in value)) + "]"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(document: str) -> str:
    """The document with the settings reference rewritten from the model."""
    begin, end = f"<!-- BEGIN GENERATED: {BLOCK_NAME} -->\n", f"<!-- END GENERATED: {BLOCK_NAME} -->"
    pattern = re.compile(f"({re.escape(begin)}).*?({re.escape(end)})", re.DOTALL)
    if pattern.search(document) is None:
        raise DocError(f"generated block '{BLOCK_NAME}' has no BEGIN/END markers")
    table = settings_table()
    return pattern.sub(lambda match: f"{match.group(1)}{table}\n{match.group(2)}", document)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite docs/agent.md (or check it with ``--check``); returns the exit status."""
    parser = argparse.ArgumentParser(description="Regenerate the settings reference of docs/agent.md.")
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_DOC)
    parser.add_argument("--check", action="store_true", help="only report whether the file is in sync")
    args = parser.parse_args(argv)
    current = args.path.read_text(encoding="utf-8")
    try:
        wanted = render(current)
    except DocError as exc:
        sys.stderr.write(f"{args.path}: {exc}\n")
        return 1
    if args.check:
        if wanted != current:
            sys.stderr.write(f"{args.path} is out of date: run python -m agent.settings_doc\n")
            return 1
        return 0
    args.path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
