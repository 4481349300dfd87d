"""Generated blocks in hand-written documents: the one helper behind every ``python -m ... --check``.

A document keeps its prose; the blocks between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` are rewritten from the code (the agent's settings reference in docs/agent.md,
the XID catalogue and the checks' settings in docs/checks.md), so the document cannot drift from it. A test
runs each generator with ``--check``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path


class DocError(ValueError):
    """The document lacks a generated block's markers."""


def replace_block(document: str, name: str, block: str) -> str:
    """``document`` with the generated block ``name`` replaced by ``block``; DocError without its markers."""
    begin, end = f"<!-- BEGIN GENERATED: {name} -->\n", f"<!-- END GENERATED: {name} -->"
    pattern = re.compile(f"({re.escape(begin)}).*?({re.escape(end)})", re.DOTALL)
    if pattern.search(document) is None:
        raise DocError(f"generated block '{name}' has no BEGIN/END markers")
    return pattern.sub(lambda match: f"{match.group(1)}{block}\n{match.group(2)}", document)


def render_blocks(document: str, generators: Mapping[str, Callable[[], str]]) -> str:
    """The document with every named block rewritten by its generator."""
    for name, generate in generators.items():
        document = replace_block(document, name, generate())
    return document


def cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_default(value: object) -> str:
    """A setting's default as a reader writes it in YAML."""
    scalar = _render_scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, frozenset | set):
        return "[" + ", ".join(sorted(str(item) for item in value)) + "]"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {render_default(item)}" for key, item in value.items()) + "}"
    return str(value)


def _render_scalar(value: object) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return None


def doc_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    default_doc: Path,
    description: str,
    render: Callable[[str], str],
) -> int:
    """The command line of a generator: rewrite the document, or with ``--check`` only say whether it is
    in sync (exit 1 when not, or when its markers are missing, with one line)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("path", nargs="?", type=Path, default=default_doc)
    parser.add_argument("--check", action="store_true", help="only report whether the file is in sync")
    args = parser.parse_args(argv)
    try:
        current = args.path.read_text(encoding="utf-8")
        wanted = render(current)
    except (OSError, DocError) as exc:
        sys.stderr.write(f"{args.path}: {exc}\n")
        return 1
    if args.check:
        if wanted != current:
            sys.stderr.write(f"{args.path} is out of date: run python -m {module}\n")
            return 1
        return 0
    args.path.write_text(wanted, encoding="utf-8")
    return 0
