"""The precedence rules the code and the tests cite are the numbered rows of docs/precedence.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# "rule 1.4", "rules 2.8, 2.16 and 2.17", "docs/precedence.md 1.5-1.7"
CITATION = re.compile(r"(?:\brules?|precedence\.md) (\d+\.\d+(?:(?:, | and |-)\d+\.\d+)*)")
SOURCES = [*(ROOT / "mlxd").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]


def _rows() -> set[str]:
    text = (ROOT / "docs" / "precedence.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| (\d+\.\d+) \|", text, flags=re.MULTILINE))


def _cited() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        for match in CITATION.finditer(path.read_text(encoding="utf-8")):
            for number in re.findall(r"\d+\.\d+", match.group(1)):
                found.setdefault(number, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_cited_rule_is_a_row_of_the_document() -> None:
    rows = _rows()
    assert {"1.1", "1.14", "2.1", "2.17", "3.1"} <= rows
    missing = {number: sorted(files) for number, files in _cited().items() if number not in rows}
    assert not missing, f"cited but not in docs/precedence.md: {missing}"


def test_the_document_is_cited_by_its_path() -> None:
    """``docs/precedence.md`` from the repository root (a link inside docs/ may say ``precedence.md``)."""
    stale = [str(path.relative_to(ROOT)) for path in SOURCES if path != Path(__file__).resolve()
             and re.search(r"(?<!docs/)(?<![\[(])precedence\.md", path.read_text(encoding="utf-8"))]
    assert stale == []
