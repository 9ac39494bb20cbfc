"""A plain ``pip install`` (no extras) runs every ``mlxd`` command: each third-party module the package imports,
at the top of a file or inside a function, comes from a distribution that [project.dependencies] declares, and each
declared distribution is imported somewhere (no dependency kept for nothing)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_normal(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))  # type: ignore[union-attr]
            for requirement in project["dependencies"]}


def _imported() -> dict[str, set[str]]:
    """Top-level module name -> the files of mlxd that import it, for every module outside the standard library."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "mlxd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "mlxd" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_module_is_a_declared_dependency() -> None:
    declared = _declared()
    providers = importlib.metadata.packages_distributions()
    missing = {module: sorted(files) for module, files in _imported().items()
               if not declared & {_normal(d) for d in providers.get(module, [])}}
    assert not missing, f"imported by mlxd but not in [project.dependencies]: {missing}"


def test_every_declared_dependency_is_imported() -> None:
    providers = importlib.metadata.packages_distributions()
    used = {_normal(d) for module in _imported() for d in providers.get(module, [])}
    assert _declared() - used == set()
