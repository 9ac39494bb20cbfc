"""A plain ``pip install`` (no extras) runs every ``mlxd`` command.

Each third-party module that importing an mlxd module imports (at the top of a file or a class, outside
``if TYPE_CHECKING``) comes from a distribution [project.dependencies] declares. A module imported only inside a
function, when the feature that needs it runs, may come from an optional extra instead (``multimodal``: mlx-vlm and
the media decoders), never from the ``test`` extra. And each main dependency is imported somewhere, so none is kept
for nothing (an extra may also hold what its packages need at run time), or, for a shared library, loaded.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_normal(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in requirements}  # type: ignore[union-attr]


MAIN = _names(PROJECT["dependencies"])
EXTRAS = _names([r for extra, reqs in PROJECT.get("optional-dependencies", {}).items() if extra != "test"
                 for r in reqs])


class _Imports(ast.NodeVisitor):
    """Third-party top-level module names, split by whether importing the file imports them."""

    def __init__(self) -> None:
        self.eager: set[str] = set()
        self.lazy: set[str] = set()
        self._depth = 0  # inside a function body, or an ``if TYPE_CHECKING:`` block

    def _add(self, name: str) -> None:
        top = name.split(".")[0]
        if top != "mlxd" and top not in sys.stdlib_module_names:
            (self.lazy if self._depth else self.eager).add(top)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._add(node.module)

    def _nested(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            self._nested(node)
        else:
            self.generic_visit(node)


def _imports() -> dict[str, dict[str, set[str]]]:
    """``{"eager"|"lazy": {module: files}}`` over every file of mlxd."""
    found: dict[str, dict[str, set[str]]] = {"eager": {}, "lazy": {}}
    for path in sorted((ROOT / "mlxd").rglob("*.py")):
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        for kind, modules in (("eager", visitor.eager), ("lazy", visitor.lazy)):
            for module in modules:
                found[kind].setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return found


# Import names that differ from their distribution's, for a module of an extra that is not installed here.
_DISTRIBUTION_OF = {"PIL": "pillow"}


@functools.cache
def _installed() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The distributions that provide ``module``; when it is not installed here, the distribution of its name."""
    provided = _installed().get(module)
    return {_normal(d) for d in provided} if provided else {_normal(_DISTRIBUTION_OF.get(module, module))}


def test_every_module_imported_on_import_is_a_main_dependency() -> None:
    missing = {module: sorted(files) for module, files in _imports()["eager"].items()
               if not _distributions(module) & MAIN}
    assert not missing, f"imported when mlxd is imported, but not in [project.dependencies]: {missing}"


def test_every_module_imported_by_a_feature_is_declared() -> None:
    missing = {module: sorted(files) for module, files in _imports()["lazy"].items()
               if not _distributions(module) & (MAIN | EXTRAS)}
    assert not missing, f"imported by mlxd, but in neither [project.dependencies] nor an extra: {missing}"


def test_every_declared_dependency_is_imported() -> None:
    """Or, for a distribution that carries only a shared library (the packaged OpenBLAS), loaded by the code that
    names it."""
    from mlxd.engine.cpu.blas_libs import PACKAGED_DIST

    imports = _imports()
    used = {d for kind in imports.values() for module in kind for d in _distributions(module)}
    assert MAIN - used == {_normal(PACKAGED_DIST)}
