"""The house's dependency arrows (design.md): each subpackage imports only the rooms below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mlxd"
LEAVES = {"errors", "json_types", "json_out"}
ALLOWED = {
    "config": set(),
    "schemas": set(),
    "compat": {"config"},
    "engine": {"config"},
    "api": {"engine", "config", "schemas"},
    "admin": {"config", "schemas"},
    "daemon": {"admin", "api", "engine", "config", "schemas", "compat"},
}


def _imported_rooms(path: Path) -> set[str]:
    rooms: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "mlxd" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_imports_point_down(room: str) -> None:
    allowed = ALLOWED[room] | LEAVES | {room, "__version__"}
    offenders = {
        f"{path.relative_to(PACKAGE.parent)} imports mlxd.{other}"
        for path in (PACKAGE / room).rglob("*.py")
        for other in _imported_rooms(path) - allowed
    }
    assert not offenders, sorted(offenders)


def test_every_room_is_known() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED)
