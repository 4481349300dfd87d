"""Generate the configuration reference of docs/agent.md from :class:`agent.settings.AgentSettings`.

The block between ``<!-- BEGIN GENERATED: agent-settings -->`` and ``<!-- END GENERATED: agent-settings -->``
is rewritten from the model, so the document cannot drift from the code; the rest is hand-written.
``python -m agent.settings_doc`` rewrites the file, ``--check`` reports whether it is in sync (exit 1 when
not), and a test does the same check.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, AgentSettings
from core.docblocks import cell, doc_main, render_default, replace_block

DEFAULT_DOC = Path("docs/agent.md")
BLOCK_NAME = "agent-settings"
_NOT_EXPANDED = frozenset({"checks"})  # documented field by field in docs/checks.md


def settings_table() -> str:
    """Every settings key, its environment variable, default and meaning: one Markdown row each."""
    lines = ["| Key | Environment variable | Default | Meaning |", "|---|---|---|---|"]
    for key, default, description in _rows(AgentSettings, _defaults(), ()):
        env = ENV_PREFIX + ENV_NESTED_DELIMITER.join(part.upper() for part in key)
        dotted = ".".join(key)
        lines.append(f"| `{dotted}` | `{env}` | `{default}` | {cell(description)} |")
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
            default = render_default(field.get_default(call_default_factory=True))
        yield key, default, field.description or ""


def render(document: str) -> str:
    """The document with the settings reference rewritten from the model."""
    return replace_block(document, BLOCK_NAME, settings_table())


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite docs/agent.md (or check it with ``--check``); returns the exit status."""
    return doc_main(
        argv,
        module="agent.settings_doc",
        default_doc=DEFAULT_DOC,
        description="Regenerate the settings reference of docs/agent.md.",
        render=render,
    )


if __name__ == "__main__":
    raise SystemExit(main())
