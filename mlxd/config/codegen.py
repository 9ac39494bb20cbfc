"""Generates ``mlxd/config/model.py`` (the typed Config) from the option table.

Run ``python -m mlxd.config.codegen`` after changing the table; a test fails while the file is out of date. A
written-out class (rather than one built at import time) keeps ``cfg.ctx_size`` visible to type checkers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlxd.config.options import OptionSpec, ValueType, table

_TYPES = {ValueType.INT: "int", ValueType.FLOAT: "float", ValueType.STR: "str", ValueType.BOOL: "bool",
          ValueType.LIST: "list[str]", ValueType.PAIR: "list[str]",
          ValueType.SCALED: "list[tuple[str, float]]"}

HEADER = '''"""The typed configuration, one attribute per option. Generated: ``python -m mlxd.config.codegen``."""

# fmt: off
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    """Every option's resolved value, named by its field (``ctx-size`` -> ``ctx_size``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())

    def value(self, field: str) -> object:
        """One option's value by its field name: for what walks the option table (diff, render, explain), where
        code that reads one option names its attribute."""
        return getattr(self, field)

'''


def _line(spec: OptionSpec) -> str:
    annotation = _TYPES[spec.value_type] + (" | None" if spec.optional else "")
    if isinstance(spec.default, list):
        default = f"Field(default_factory=lambda: {spec.default!r})"
    else:
        default = repr(spec.default)
    return f"    {spec.field}: {annotation} = {default}\n"


def render() -> str:
    """The source text of mlxd/config/model.py."""
    return HEADER + "".join(_line(spec) for spec in table())


def main() -> int:
    Path(__file__).with_name("model.py").write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
