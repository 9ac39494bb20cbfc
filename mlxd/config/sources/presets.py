"""The presets INI (``--models-preset PATH``): per-model overlays for router mode (docs/precedence.md 2.2-2.8).

``[*]`` is laid under every model; ``[NAME]`` defines or extends the model NAME; keys before any header form
``[default]``, dropped when empty. Keys are matched exactly: any spelling without dashes or any env name, so
``ctx_size`` is refused. A negative spelling as the key inverts its boolean; the ``LLAMA_ARG_NO_X`` env name as the
key does not (b10621's quirk, rule 2.7). ``load-on-startup``, ``stop-timeout`` and ``dedup-cache-models`` exist only
here (rule 2.8); ``version`` is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxd.config.options import OptionTable
from mlxd.config.sources.ini import parse_ini
from mlxd.config.sources.keys import bad_value, keyed_setting, lookup
from mlxd.config.values import BadValue, Setting, parse_bool_value
from mlxd.errors import ConfigProblem

PRESET_ONLY: dict[str, tuple[type, Any]] = {
    "load-on-startup": (bool, False),
    "stop-timeout": (int, 10),
    "dedup-cache-models": (bool, False),
}
# Their pseudo-env spellings (rule 2.6), accepted as keys like any env name.
PRESET_ONLY_ENV = {"__PRESET_" + key.upper().replace("-", "_"): key for key in PRESET_ONLY}


@dataclass
class Presets:
    """A parsed presets file."""

    path: str
    global_settings: dict[str, Setting] = field(default_factory=dict)
    models: dict[str, dict[str, Setting]] = field(default_factory=dict)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)


def normalise_section(name: str) -> str:
    """``[repo:tag]``: keep the tag's last ``-``/``.`` part, upper-cased (rule 2.5)."""
    repo, colon, tag = name.rpartition(":")
    if not colon or not tag:
        return name
    for sep in ("-", "."):
        tag = tag.rpartition(sep)[2] if sep in tag else tag
    return f"{repo}:{tag.upper()}"


class PresetsSource:
    """Reads one presets document (its text and the path it came from)."""

    def __init__(self, text: str, path: str, table: OptionTable) -> None:
        self.text = text
        self.path = path
        self.table = table

    def read(self) -> Presets:
        out = Presets(self.path)
        doc, problems = parse_ini(self.text, f"preset:{self.path}")
        out.problems.extend(problems)
        for raw_section, entries in doc.sections.items():
            section = raw_section if raw_section == "*" else normalise_section(raw_section)
            if section == "default" and all(e.key == "version" for e in entries):
                continue
            settings: dict[str, Setting] = {}
            extras: dict[str, Any] = {}
            for entry in entries:
                where = f"preset:[{section}]"
                if entry.key == "version":
                    continue
                preset_key = PRESET_ONLY_ENV.get(entry.key, entry.key)
                if preset_key in PRESET_ONLY:
                    kind, _ = PRESET_ONLY[preset_key]
                    try:
                        extras[preset_key] = parse_bool_value(entry.value) if kind is bool else int(entry.value)
                    except (BadValue, ValueError):
                        out.problems.append(ConfigProblem(entry.key, f"{self.path}:{entry.line}",
                                                          f"expected {'a boolean' if kind is bool else 'an integer'}",
                                                          value=entry.value))
                    continue
                spec = lookup(self.table, entry.key, env_names=True)
                if spec is None:
                    hint = self.table.suggest(entry.key, keys=True)
                    message = f"option '{entry.key}' not recognized in preset '{section}'"
                    out.problems.append(ConfigProblem(
                        entry.key, f"{self.path}:{entry.line}",
                        message + (f"; did you mean '{hint}'?" if hint else "")))
                    continue
                try:
                    settings[spec.name] = keyed_setting(spec, entry.key, entry.value, where, native=False)
                except BadValue as exc:
                    out.problems.append(bad_value(spec, entry.value, f"{where} {self.path}:{entry.line}", exc))
            if section == "*":
                out.global_settings = settings
            else:
                out.models.setdefault(section, {}).update(settings)
                out.extras.setdefault(section, {}).update(extras)
        return out
