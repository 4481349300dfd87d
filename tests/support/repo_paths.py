"""Where things are in the repository, for tests at any depth of ``tests/`` (import it as ``repo_paths``).

A test that computed ``Path(__file__).parents[n]`` broke whenever it moved one directory up or down; these are
computed once, from this file's own place (``tests/support/``).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository's root: ``pyproject.toml``, ``docs/``, ``helm/``."""

DOCS = REPO_ROOT / "docs"
"""The user documentation that some tests hold to the code (``docs/*.md``)."""

FIXTURES = REPO_ROOT / "tests" / "fixtures"
"""Saved inputs: ``dcgm/``, ``kernel_logs/``, ``real/``, ``snapshots/`` (each with its README)."""
