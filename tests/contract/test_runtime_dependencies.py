"""`pip install .` (the README's first command) must be enough to run every shipped module: each third-party
module the packages import comes from a distribution listed in `[project] dependencies`, not only in the
`dev` extra that CI installs."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from repo_paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_distributions() -> set[str]:
    names = {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0] for spec in PYPROJECT["project"]["dependencies"]}
    return {_normalised(name) for name in names}


def _imported_top_level_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it, over every module of the shipped packages."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    found.setdefault(module.split(".")[0], str(path.relative_to(REPO_ROOT)))
    return found


def test_every_third_party_import_of_the_packages_is_a_runtime_dependency() -> None:
    distributions = importlib.metadata.packages_distributions()
    runtime = _runtime_distributions()
    missing = []
    for module, where in sorted(_imported_top_level_modules().items()):
        if module in PACKAGES or module in sys.stdlib_module_names or module == "__future__":
            continue
        providers = {_normalised(name) for name in distributions.get(module, [])}
        if not providers & runtime:
            missing.append(f"{module} (imported by {where}; from {sorted(providers) or 'nowhere'})")
    assert not missing, "not in [project] dependencies: " + "; ".join(missing)
