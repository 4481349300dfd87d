"""Generate the tables of docs/checks.md from the code, so the document cannot drift from it.

The document keeps hand-written prose; the blocks between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` are rewritten from :data:`checks.xid_catalogue.CATALOGUE` and
:class:`checks.config.ChecksConfig`. ``python -m checks.docgen`` rewrites the file; ``--check`` only
reports whether it is in sync (exit 1 when not). A test does the same check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from checks.config import ChecksConfig
from checks.xid_catalogue import BUCKET_ACTION, CATALOGUE, XidEntry
from core.docblocks import cell, doc_main, render_blocks, render_default

DEFAULT_DOC = Path("docs/checks.md")


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
    return "| " + " | ".join(cell(text) for text in cells) + " |"


def config_table() -> str:
    """Every configuration key with its default and description, one Markdown row each."""
    lines = ["| Key | Default | Meaning |", "|---|---|---|"]
    defaults = ChecksConfig()
    for section_name in ChecksConfig.model_fields:
        section = getattr(defaults, section_name)
        if not isinstance(section, BaseModel):
            continue
        for field_name, field in type(section).model_fields.items():
            value = render_default(getattr(section, field_name))
            lines.append(f"| `{section_name}.{field_name}` | `{value}` | {cell(field.description or '')} |")
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {"xid-catalogue": xid_table, "config": config_table}


def render(document: str) -> str:
    """The document with every generated block rewritten from the code."""
    return render_blocks(document, GENERATORS)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite docs/checks.md (or check it with ``--check``); returns the exit status."""
    return doc_main(
        argv,
        module="checks.docgen",
        default_doc=DEFAULT_DOC,
        description="Regenerate the tables of docs/checks.md.",
        render=render,
    )


if __name__ == "__main__":
    raise SystemExit(main())
