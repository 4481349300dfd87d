"""Generate the tables of docs/checks.md from the code, so the document cannot drift from it.

The document keeps hand-written prose; the blocks between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` are rewritten from :data:`checks.xid_catalogue.CATALOGUE` and
:class:`checks.config.ChecksConfig`. ``python -m checks.docgen`` rewrites the file; ``--check`` only
reports whether it is in sync (exit 1 when not). A test does the same check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path

from pydantic import BaseModel

from checks.config import ChecksConfig
from checks.xid_catalogue import BUCKET_ACTION, CATALOGUE, XidEntry

DEFAULT_DOC = Path("docs/checks.md")


class DocError(ValueError):
    """The document lacks a generated block's markers."""


def xid_table() -> str:
    """The XID catalogue as implemented: one Markdown row per XID, in numeric order."""
    lines = [
        "| XID | Mnemonic | Description | NVIDIA bucket | Action | Status | Source of the decision |",
        "|---:|---|---|---|---|---|---|",
    ]
    lines.extend(_xid_row(entry) for entry in sorted(CATALOGUE.values(), key=lambda entry: entry.xid))
    return "\n".join(lines)


def _xid_row(entry: XidEntry) -> str:
    if entry.bucket in BUCKET_ACTION:
        source = "NVIDIA bucket" + (f"; {entry.note}" if entry.note else "")
    else:
        source = f"gpuhealth: {entry.note}"
    cells = (
        str(entry.xid),
        f"`{entry.mnemonic}`",
        entry.description,
        entry.bucket.value,
        f"`{entry.action.value}`",
        entry.status.value,
        source,
    )
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def config_table() -> str:
    """Every configuration key with its default and description, one Markdown row each."""
    lines = ["| Key | Default | Meaning |", "|---|---|---|"]
    defaults = ChecksConfig()
    for section_name in ChecksConfig.model_fields:
        section = getattr(defaults, section_name)
        if not isinstance(section, BaseModel):
            continue
        for field_name, field in type(section).model_fields.items():
            value = _render_default(getattr(section, field_name))
            lines.append(f"| `{section_name}.{field_name}` | `{value}` | {_cell(field.description or '')} |")
    return "\n".join(lines)


def _render_default(value: object) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_render_default(item)}" for key, item in value.items()) + "}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


GENERATORS: dict[str, Callable[[], str]] = {"xid-catalogue": xid_table, "config": config_table}


def render(document: str) -> str:
    """The document with every generated block rewritten from the code."""
    for name, generate in GENERATORS.items():
        document = _replace_block(document, name, generate())
    return document


def _replace_block(document: str, name: str, block: str) -> str:
    begin, end = f"<!-- BEGIN GENERATED: {name} -->\n", f"<!-- END GENERATED: {name} -->"
    pattern = re.compile(f"({re.escape(begin)}).*?({re.escape(end)})", re.DOTALL)
    if pattern.search(document) is None:
        raise DocError(f"generated block '{name}' has no BEGIN/END markers")
    return pattern.sub(lambda match: f"{match.group(1)}{block}\n{match.group(2)}", document)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite docs/checks.md (or check it with ``--check``); returns the exit status."""
    parser = argparse.ArgumentParser(description="Regenerate the tables of docs/checks.md.")
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_DOC)
    parser.add_argument("--check", action="store_true", help="only report whether the file is in sync")
    args = parser.parse_args(argv)
    current = args.path.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            sys.stderr.write(f"{args.path} is out of date: run python -m checks.docgen\n")
            return 1
        return 0
    args.path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
