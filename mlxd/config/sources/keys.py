"""File keys (TOML, INI, admin JSON) to typed settings: the lookup every document source shares."""

from __future__ import annotations

from typing import Any

from mlxd.config.options import OptionSpec, OptionTable
from mlxd.config.values import BadValue, Setting, is_value_less, parse_bool_value, parse_native, parse_text
from mlxd.errors import ConfigProblem


def lookup(table: OptionTable, key: str, *, env_names: bool) -> OptionSpec | None:
    """The option a key names: any spelling without leading dashes, exactly (docs/precedence.md rule 2.6); INI
    documents also accept env names."""
    spec = table.by_key.get(key)
    if spec is None and env_names:
        spec = table.by_env.get(key)
    return spec


def unknown_key(table: OptionTable, key: str, source: str, what: str = "option", *,
                hint_it: bool = True) -> ConfigProblem:
    """An unknown key's problem; with ``hint_it`` (a did-you-mean costs milliseconds) the closest known key."""
    hint = table.suggest(key, keys=True) if hint_it else None
    message = f"unknown {what}" + (f"; did you mean '{hint}'?" if hint else "")
    return ConfigProblem(key, source, message)


def keyed_setting(spec: OptionSpec, key: str, raw: Any, source: str, *, native: bool) -> Setting:
    """The setting ``key = raw`` makes; BadValue if the value does not fit.

    A negative spelling as the key inverts a boolean (``no-mmap = true`` is false). The ``LLAMA_ARG_NO_X`` env name
    as a key is not inverted: b10621 stores ``LLAMA_ARG_NO_MMAP = true`` as true (rule 2.7).
    """
    if is_value_less(spec):
        if native:
            if not isinstance(raw, bool):
                raise BadValue("expected true or false")
            value: Any = raw
        else:
            value = parse_bool_value(str(raw).strip())
        if f"-{key}" in spec.negatives or f"--{key}" in spec.negatives:
            value = not value
        return Setting(value, source)
    return Setting(parse_native(spec, raw) if native else parse_text(spec, str(raw)), source)


def bad_value(spec: OptionSpec, raw: Any, source: str, exc: BadValue) -> ConfigProblem:
    shown = "<redacted>" if spec.secret else (raw if isinstance(raw, str) else repr(raw))
    return ConfigProblem(spec.name, source, str(exc), value=shown)
