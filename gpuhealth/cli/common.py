"""Helpers shared by the command modules: node identity, configuration files, atomic writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpuhealth.cli.errors import CliError


def load_yaml_mapping(path: str | Path, *, exit_code: int = 2) -> dict[str, Any]:
    """Read a YAML file whose top level is a mapping; an empty file is an empty mapping."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", exit_code) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise CliError(f"{path}: not valid YAML: {problem}{where}", exit_code) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError(f"{path}: the top level must be a mapping, not {type(data).__name__}", exit_code)
    return data


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` so that readers see the old file or the new one, never half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
