"""The README answers a newcomer's first questions: which Python, how to install on a cluster (and what is
not published), what the product does not do, and where each document is; every link it has resolves."""

from __future__ import annotations

import re
import tomllib

from repo_paths import DOCS, REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(?P<body>.*?)(?=^## |\Z)", README, re.DOTALL | re.MULTILINE)
    assert match is not None, f"README has no '## {title}' section"
    return match["body"]


def test_it_says_which_python_the_package_needs() -> None:
    needs = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    version = needs.removeprefix(">=")
    assert f"Python {version} or newer" in README


def test_install_on_a_cluster_names_the_chart_the_nomad_jobs_the_image_and_what_is_not_published() -> None:
    body = _section("Install on a cluster")
    for needle in ("helm install", "helm/gpuhealth", "deploy/nomad", "docker build", "PyPI"):
        assert needle in body, needle
    assert "Nothing is published" in body
    assert "remediator" in body  # the Nomad policies include the central remediator's


def test_what_it_does_not_do_is_said() -> None:
    assert len(re.findall(r"^- ", _section("What it does not do"), re.MULTILINE)) >= 4


def test_the_documentation_index_links_every_page() -> None:
    index = _section("Documentation")
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in index, f"{page.name} is not in the README's documentation index"


def test_every_relative_link_resolves() -> None:
    for match in _LINK.finditer(README):
        target = match["target"]
        if "://" in target:
            continue
        assert (REPO_ROOT / target).exists(), target
