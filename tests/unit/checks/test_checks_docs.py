"""docs/checks.md stays in sync with the catalogue and the settings (drift test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_paths import DOCS

from checks.config import ChecksConfig
from checks.docgen import config_table, main, render, xid_table
from checks.xid_catalogue import CATALOGUE
from core.docblocks import DocError

DOC = DOCS / "checks.md"


def test_docs_checks_md_is_generated_from_the_current_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert render(text) == text, "run: python -m checks.docgen"


def test_the_xid_table_has_one_row_per_catalogue_entry() -> None:
    rows = [line for line in xid_table().splitlines()[2:] if line.startswith("| ")]
    assert [int(row.split("|")[1]) for row in rows] == sorted(CATALOGUE)


def test_the_config_table_names_every_key() -> None:
    table = config_table()
    for section_name in ChecksConfig.model_fields:
        section = getattr(ChecksConfig(), section_name)
        for field_name in type(section).model_fields:
            assert f"`{section_name}.{field_name}`" in table


def test_check_mode_reports_a_stale_document(tmp_path: Path) -> None:
    stale = tmp_path / "checks.md"
    stale.write_text(DOC.read_text(encoding="utf-8").replace("| 79 |", "| 97 |"), encoding="utf-8")
    assert main([str(stale), "--check"]) == 1
    assert main([str(stale)]) == 0
    assert main([str(stale), "--check"]) == 0


def test_a_document_without_markers_is_an_error() -> None:
    with pytest.raises(DocError, match="xid-catalogue"):
        render("<!-- BEGIN GENERATED: config -->\n<!-- END GENERATED: config -->\n")


def test_the_generator_says_in_one_line_when_the_markers_are_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "checks.md"
    document.write_text("# no generated blocks here\n", encoding="utf-8")
    assert main([str(document), "--check"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "has no BEGIN/END markers" in error
    assert main([str(tmp_path / "missing.md")]) == 1  # an unreadable file: one line too, no traceback
