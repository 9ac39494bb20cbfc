"""b10621's own config.ini files (docs/precedence.md rule 1.2), below the TOML file.

``/etc/llama.cpp/config.ini``, then ``${XDG_CONFIG_HOME:-$HOME/.config}/llama.cpp/config.ini``; later files win. In
each, only ``[*]`` and ``[default]`` apply (``[default]`` over ``[*]``, as a model's own keys sit over ``[*]``). As in
b10621, an unknown key is a warning and is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlxd.config.options import OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.sources.ini import parse_ini
from mlxd.config.sources.keys import bad_value, keyed_setting, lookup
from mlxd.config.values import BadValue

SYSTEM_DIR = Path("/etc/llama.cpp")


def config_ini_paths(env: Mapping[str, str], system_dir: Path = SYSTEM_DIR) -> list[Path]:
    """The config.ini files b10621 reads, lowest priority first."""
    paths = [system_dir / "config.ini"]
    xdg = env.get("XDG_CONFIG_HOME") or (f"{env['HOME']}/.config" if env.get("HOME") else None)
    if xdg:
        paths.append(Path(xdg) / "llama.cpp" / "config.ini")
    return paths


class ConfigIniSource:
    """Reads config.ini documents given as (path, text), lowest priority first."""

    def __init__(self, files: list[tuple[str, str]], table: OptionTable) -> None:
        self.files = files
        self.table = table

    def read(self) -> Layer:
        layer = Layer("config.ini")
        for path, text in self.files:
            doc, problems = parse_ini(text, f"ini:{path}")
            layer.problems.extend(problems)
            for section in ("*", "default"):
                for entry in doc.sections.get(section, []):
                    where = f"ini:{path}:{entry.line}"
                    if entry.key == "version":
                        continue
                    spec = lookup(self.table, entry.key, env_names=True)
                    if spec is None:
                        layer.warnings.append(f"{where}: unknown key '{entry.key}' skipped")
                        continue
                    try:
                        layer.settings[spec.name] = keyed_setting(spec, entry.key, entry.value, where, native=False)
                    except BadValue as exc:
                        layer.problems.append(bad_value(spec, entry.value, where, exc))
        return layer
