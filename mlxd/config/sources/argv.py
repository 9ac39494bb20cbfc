"""The command line, after the pre-pass: b10621's parsing rules (docs/precedence.md 1.8-1.10).

Value options take the next argument whatever it looks like (``-n -1``); a repeated option keeps its last value,
except appending options, which keep every value; value-less spellings set true, negative ones false.
"""

from __future__ import annotations

from mlxd.config.options import Kind, OptionTable
from mlxd.config.prepass import prepass
from mlxd.config.sources.base import Layer
from mlxd.config.values import BadValue, Setting, flag_value, parse_text
from mlxd.errors import ConfigProblem


class ArgvSource:
    """Reads one command line (without the program name)."""

    def __init__(self, argv: list[str], table: OptionTable) -> None:
        self.argv = list(argv)
        self.table = table

    def read(self) -> Layer:
        layer = Layer("cli")
        tokens = prepass(self.argv, self.table)
        seen: set[str] = set()
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            source = f"cli:{tok.original}"
            if tok.role != "option":
                layer.problems.append(ConfigProblem(None, "cli", f"invalid argument: {tok.original}"))
                continue
            spec = self.table.by_spelling.get(tok.text)
            if spec is None:
                hint = self.table.suggest(tok.original.lstrip("-") if not tok.original.startswith("--")
                                          else tok.text)
                message = f"invalid argument: {tok.original}"
                if hint:
                    hint = hint if hint.startswith("-") else f"--{hint}"
                    message += f"; did you mean {hint}?"
                layer.problems.append(ConfigProblem(None, "cli", message))
                if i < len(tokens) and tokens[i].role == "positional":
                    i += 1  # most likely the unknown option's value: one problem, not two
                continue
            if spec.kind in (Kind.FLAG, Kind.BOOL_PAIR):
                layer.settings[spec.name] = Setting(flag_value(spec, tok.text), source)
                continue
            count = 2 if spec.kind is Kind.TWO_VALUES else 1
            values = [t.original for t in tokens[i:i + count] if t.role == "value"]
            i += len(values)
            if len(values) < count:
                layer.problems.append(ConfigProblem(spec.name, source, "expected a value"
                                                    if count == 1 else f"expected {count} values"))
                continue
            try:
                value = parse_text(spec, values if count == 2 else values[0])
            except BadValue as exc:
                shown = "<redacted>" if spec.secret else " ".join(values)
                layer.problems.append(ConfigProblem(spec.name, source, str(exc), value=shown))
                continue
            previous = layer.settings.get(spec.name)
            if previous is not None and (spec.append or spec.accumulate):
                value = list(previous.value) + list(value)
            elif spec.name in seen:
                layer.warnings.append(f"{source}: argument specified multiple times; only the last value is used")
            seen.add(spec.name)
            layer.settings[spec.name] = Setting(value, source)
        return layer
