"""``docs/compat.md`` is generated from the manifest and kept current."""

from __future__ import annotations

from pathlib import Path

from mlxd.compat import docs
from mlxd.compat.manifest import available_kinds, load

PAGE = Path(__file__).resolve().parents[2] / "docs" / "compat.md"


def test_compat_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == docs.render(), "run: python -m mlxd.compat.docs"


def test_compat_page_has_one_row_per_entry() -> None:
    text = docs.render()
    for kind in available_kinds():
        for entry in load(kind).entries:
            assert f"| `{docs._cell(entry.id)}` |" in text, (kind, entry.id)
