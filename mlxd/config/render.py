"""Renderings of a resolved configuration: the explain table (text, JSON) and TOML (dump, from-args)."""

from __future__ import annotations

import json
from typing import Any

import tomli_w

from mlxd.config.layering import DEPENDENT_DEFAULTS
from mlxd.config.model import Config
from mlxd.config.options import OptionSpec, table
from mlxd.config.resolved import ResolvedConfig
from mlxd.config.values import is_default

REDACTED = "<redacted>"


def shown(spec: OptionSpec, value: Any) -> Any:
    """A value as it may be shown to anyone: secrets redacted, emptiness kept visible."""
    if spec.secret and value:
        return [REDACTED] * len(value) if isinstance(value, list) else REDACTED
    return value


def _options(config: Config, provenance: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {spec.name: {"value": shown(spec, config.value(spec.field)), "source": provenance[spec.name]}
            for spec in table()}


def explain_data(resolved: ResolvedConfig) -> dict[str, Any]:
    """``{"options": {NAME: {"value", "source"}}}`` for every option; router mode adds ``"models"``."""
    data: dict[str, Any] = {"options": _options(resolved.config, resolved.provenance)}
    if resolved.is_router:
        data["models"] = {name: _options(m.config, m.provenance) for name, m in resolved.models.items()}
    return data


def explain_json(resolved: ResolvedConfig) -> str:
    return json.dumps(explain_data(resolved), indent=2, ensure_ascii=False) + "\n"


def _text_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def explain_text(resolved: ResolvedConfig) -> str:
    """One line per option: ``name = value  (source)``, explicitly set options first."""
    lines = [f"# config hash {resolved.config_hash}", f"# mode: {'router' if resolved.is_router else 'single model'}"]
    specs = sorted(table(), key=lambda s: is_default(resolved.provenance[s.name]))
    for spec in specs:
        value = shown(spec, resolved.config.value(spec.field))
        lines.append(f"{spec.name} = {_text_value(value)}  ({resolved.provenance[spec.name]})")
    for name, model in resolved.models.items():
        lines.append(f"\n[model {name}] ({model.source})")
        for spec in table():
            if model.provenance[spec.name] != resolved.provenance[spec.name] or (
                    model.config.value(spec.field) != resolved.config.value(spec.field)):
                value = shown(spec, model.config.value(spec.field))
                lines.append(f"{spec.name} = {_text_value(value)}  ({model.provenance[spec.name]})")
    return "\n".join(lines) + "\n"


def toml_values(config: Config, *, only: set[str] | None = None, all_values: bool = False,
                secrets: bool = False, base: Config | None = None,
                provenance: dict[str, str] | None = None) -> dict[str, Any]:
    """The TOML document of a Config: values that differ from the default (or from ``base``), all with
    ``all_values``, only the names in ``only`` when given. None (unset) has no TOML form and is left out.

    With ``provenance``, an option whose default depends on another one (``watch-config``, on with a TOML file) is
    written when a source set it and left out when it holds its default: the file is read with that other default.
    """
    out: dict[str, Any] = {}
    for spec in table():
        if spec.name == "config" or (only is not None and spec.name not in only):
            continue
        value = config.value(spec.field)
        reference = base.value(spec.field) if base is not None else spec.default
        if provenance is not None and spec.name in DEPENDENT_DEFAULTS and not all_values and only is None:
            if not is_default(provenance[spec.name]) and value is not None:
                out[spec.name] = value
            continue
        if value is None or (not all_values and only is None and value == reference):
            continue
        out[spec.name] = shown(spec, value) if not secrets else value
    return out


def dump_toml(resolved: ResolvedConfig, *, all_values: bool = False, secrets: bool = False) -> str:
    """The resolved configuration as TOML (tomli-w); router models as ``[models.NAME]`` tables of what differs
    from the base."""
    doc = toml_values(resolved.config, all_values=all_values, secrets=secrets, provenance=resolved.provenance)
    if resolved.models:
        doc["models"] = {name: toml_values(m.config, secrets=secrets, base=resolved.config)
                         for name, m in resolved.models.items()}
    # A file with no bytes reads as a truncated write and is refused (layering); say that nothing is set instead.
    return tomli_w.dumps(doc) if doc else "# every option at its default\n"


def from_args_toml(resolved: ResolvedConfig, *, secrets: bool = True) -> str:
    """The options a command line set, as TOML; ``secrets=False`` redacts them as ``dump_toml`` does (the CLI's
    default: a terminal or a pasted bug report is no place for an API key)."""
    cli = {name for name, source in resolved.provenance.items() if source.startswith("cli:")}
    return tomli_w.dumps(toml_values(resolved.config, only=cli, secrets=secrets))


def help_text() -> str:
    """``mlxd-server --help``: every option in llama-server's layout, from the option table."""
    lines = ["usage: mlxd-server [options]", ""]
    category = None
    for spec in table():
        if spec.category != category:
            category = spec.category
            lines.append(f"----- {category} -----")
        spelled = ", ".join(spec.spellings)
        if spec.takes_value:
            spelled += f" {spec.placeholder or 'VALUE'}"
        lines.append(spelled)
        notes = [spec.help] if spec.help else []
        env = spec.env + ((spec.env_negative,) if spec.env_negative else ())
        if env:
            notes.append(f"(env: {', '.join(env)})")
        if spec.treatment in ("refuse", "removed"):
            notes.append("(not supported by mlxd)")
        lines.extend(f"        {n}" for n in notes)
    return "\n".join(lines) + "\n"
