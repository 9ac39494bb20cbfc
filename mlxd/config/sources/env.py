"""The environment: LLAMA_ARG_* (and LLAMA_API_KEY, HF_TOKEN, MTMD_BACKEND_DEVICE), then MLXD_*.

b10621's rules (docs/precedence.md 1.5-1.7): a value-less flag fires only for a truthy word and a falsey word does
nothing; a ``--x/--no-x`` pair reads ``parse_bool_value``, and the mere existence of ``LLAMA_ARG_NO_X`` makes it
false, ahead of ``LLAMA_ARG_X``; value options take the text as their value. mlxd is stricter in one place: a flag
value that is neither truthy nor falsey is an error instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlxd.config.options import Kind, OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.values import FALSEY, TRUTHY, BadValue, Setting, parse_bool_value, parse_text
from mlxd.errors import ConfigProblem


class EnvSource:
    """Reads one snapshot of the environment."""

    def __init__(self, env: Mapping[str, str], table: OptionTable) -> None:
        self.env = env
        self.table = table

    def read(self) -> Layer:
        layer = Layer("env")
        for spec in self.table:
            if spec.kind is Kind.BOOL_PAIR and spec.env_negative and spec.env_negative in self.env:
                layer.settings[spec.name] = Setting(False, f"env:{spec.env_negative}")
                continue
            for name in spec.env:
                if name not in self.env:
                    continue
                text = self.env[name]
                source = f"env:{name}"
                try:
                    if spec.kind is Kind.FLAG:
                        if text in TRUTHY:
                            layer.settings[spec.name] = Setting(True, source)
                        elif text not in FALSEY:
                            raise BadValue("invalid boolean value (expected on/enabled/true/1 or "
                                           "off/disabled/false/0)")
                    elif spec.kind is Kind.BOOL_PAIR:
                        layer.settings[spec.name] = Setting(parse_bool_value(text), source)
                    else:
                        layer.settings[spec.name] = Setting(parse_text(spec, text), source)
                except BadValue as exc:
                    shown = "<redacted>" if spec.secret else text
                    layer.problems.append(ConfigProblem(spec.name, source, str(exc), value=shown))
        return layer
