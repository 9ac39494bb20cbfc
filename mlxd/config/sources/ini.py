"""b10621's INI grammar (common/preset.cpp:184-223), shared by config.ini files and the presets file.

``[section]`` headers and ``key = value`` lines; ``;`` and ``#`` start comments (at the start of a line, or after
whitespace at the end of one); keys match ``[a-zA-Z_][a-zA-Z0-9_.-]*``; keys before any header belong to
``[default]`` (docs/precedence.md rules 2.2 and 2.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlxd.errors import ConfigProblem

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_TRAILING_COMMENT = re.compile(r"\s[;#].*$")


@dataclass(frozen=True)
class IniEntry:
    key: str
    value: str
    line: int


@dataclass
class IniDocument:
    """Sections in file order; each holds its entries in file order."""

    sections: dict[str, list[IniEntry]] = field(default_factory=dict)
    section_lines: dict[str, int] = field(default_factory=dict)


def parse_ini(text: str, where: str) -> tuple[IniDocument, list[ConfigProblem]]:
    """Parse INI text; problems carry ``where:LINE:COLUMN``."""
    doc = IniDocument()
    problems: list[ConfigProblem] = []
    section = "default"
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        col = raw.index(line[0]) + 1
        if line.startswith("["):
            close = line.find("]")
            if close < 2:
                problems.append(ConfigProblem(None, f"{where}:{lineno}:{col}", "malformed section header"))
                continue
            section = line[1:close].strip()
            doc.sections.setdefault(section, [])
            doc.section_lines.setdefault(section, lineno)
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            problems.append(ConfigProblem(None, f"{where}:{lineno}:{col}", "expected 'key = value'"))
            continue
        value = _TRAILING_COMMENT.sub("", value).strip()
        doc.sections.setdefault(section, []).append(IniEntry(key, value, lineno))
        doc.section_lines.setdefault(section, lineno)
    return doc, problems
