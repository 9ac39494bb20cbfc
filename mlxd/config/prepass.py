"""The command-line pre-pass: classify every argument, rewrite llama.cpp's single-dash multi-letter spellings.

Option parsers treat ``-ngl`` as ``-n gl``; llama.cpp does not. The pre-pass walks the arguments with the option
table, so it knows which arguments are values (a value that happens to spell an option, such as ``-n -c``, is left
alone) and it stops at ``--``. It also applies b10621's ``--ctx_size`` -> ``--ctx-size`` rewrite, to ``--``
arguments only (docs/precedence.md rule 1.8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlxd.config.options import Kind, OptionSpec, OptionTable

Role = Literal["option", "value", "positional", "separator"]


@dataclass(frozen=True)
class ArgToken:
    """One command-line argument after the pre-pass."""

    text: str  # the spelling to look up (rewritten) or the value
    original: str  # as typed, for provenance and diagnostics
    role: Role


def prepass(argv: list[str], table: OptionTable) -> list[ArgToken]:
    """Classify and rewrite ``argv`` (without the program name)."""
    out: list[ArgToken] = []
    pending = 0  # values still owed to the previous option
    rest = False
    for arg in argv:
        if rest:
            out.append(ArgToken(arg, arg, "positional"))
        elif pending:
            out.append(ArgToken(arg, arg, "value"))
            pending -= 1
        elif arg == "--":
            rest = True
            out.append(ArgToken(arg, arg, "separator"))
        elif arg.startswith("--"):
            text = arg.replace("_", "-")
            spec = table.by_spelling.get(text)
            pending = _values_owed(spec)
            out.append(ArgToken(text, arg, "option"))
        elif arg.startswith("-") and len(arg) > 1:
            spec = table.by_spelling.get(arg)
            text = arg
            if spec is not None and len(arg) > 2:
                text = _long_form(spec.negatives if arg in spec.negatives else spec.long) or arg
            pending = _values_owed(spec)
            out.append(ArgToken(text, arg, "option"))
        else:
            out.append(ArgToken(arg, arg, "positional"))
    return out


def _values_owed(spec: OptionSpec | None) -> int:
    if spec is None:
        return 0
    return {Kind.VALUE: 1, Kind.TWO_VALUES: 2}.get(spec.kind, 0)


def _long_form(spellings: tuple[str, ...]) -> str | None:
    longs = [s for s in spellings if s.startswith("--")]
    return longs[-1] if longs else None


def rewrite(argv: list[str], table: OptionTable) -> list[str]:
    """The argument list with every option in the spelling the parser looks up."""
    return [t.text for t in prepass(argv, table)]
