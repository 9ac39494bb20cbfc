"""The TOML file (``--config FILE`` / ``MLXD_CONFIG``): option names as keys, ``[models.NAME]`` overlays.

Keys are any spelling of an option without its leading dashes, matched exactly as in presets (``ctx-size``, ``c``,
``no-mmap``); list options take an array or upstream's comma string. Every value's provenance names its line. A
model table also takes the presets file's router-only keys (``load-on-startup``, ``stop-timeout``,
``dedup-cache-models``).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from mlxd.config.options import OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.sources.keys import bad_value, keyed_setting, lookup, unknown_key
from mlxd.config.sources.presets import PRESET_ONLY
from mlxd.config.values import BadValue, Setting
from mlxd.errors import ConfigProblem

_HEADER = re.compile(r"^\s*\[\[?\s*(.+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_.-]+))\s*=""")
_DECODE_POS = re.compile(r"\(at line (\d+), column (\d+)\)")


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """(table path..., key) -> line number, from a plain scan (tomllib keeps no positions)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header and not _KEY.match(line):
            table = tuple(part.strip().strip("\"'") for part in header.group(1).split("."))
            lines.setdefault(table, lineno)
            continue
        key = _KEY.match(line)
        if key:
            name = key.group(1) or key.group(2) or key.group(3)
            lines.setdefault(table + (name,), lineno)
    return lines


class TomlSource:
    """Reads one TOML document (its bytes and the path it came from)."""

    def __init__(self, data: bytes, path: str, table: OptionTable) -> None:
        self.data = data
        self.path = path
        self.table = table

    def read(self) -> Layer:
        layer = Layer("toml")
        try:
            text = self.data.decode("utf-8")
            doc = tomllib.loads(text)
        except UnicodeDecodeError as exc:
            layer.problems.append(ConfigProblem(None, f"toml:{self.path}", f"not UTF-8 text: {exc.reason}"))
            return layer
        except tomllib.TOMLDecodeError as exc:
            pos = _DECODE_POS.search(str(exc))
            if pos:
                where = f"toml:{self.path}:{pos.group(1)}:{pos.group(2)}"
            else:  # "at end of document"
                rows = text.splitlines() or [""]
                where = f"toml:{self.path}:{len(rows)}:{len(rows[-1]) + 1}"
            message = _DECODE_POS.sub("", str(exc)).replace("(at end of document)", "").strip()
            layer.problems.append(ConfigProblem(None, where, f"malformed TOML: {message}"))
            return layer
        lines = _key_lines(text)
        for key, raw in doc.items():
            if key == "models" and isinstance(raw, dict):
                for model, overlay in raw.items():
                    where = self._where(lines, ("models", model))
                    if not isinstance(overlay, dict):
                        layer.problems.append(ConfigProblem(f"models.{model}", where, "expected a table"))
                        continue
                    extras = self._router_keys(overlay, ("models", model), lines, layer)
                    if extras:
                        layer.model_extras[str(model)] = extras
                    rest = {k: v for k, v in overlay.items() if k not in PRESET_ONLY}
                    layer.models[str(model)] = self._settings(rest, ("models", model), lines, layer)
                continue
            layer.settings.update(self._settings({key: raw}, (), lines, layer))
        return layer

    def _router_keys(self, overlay: dict[str, Any], prefix: tuple[str, ...], lines: dict[tuple[str, ...], int],
                     layer: Layer) -> dict[str, Any]:
        """A model table's router-only keys, as in the presets file (docs/precedence.md rule 2.8), typed natively."""
        out: dict[str, Any] = {}
        for key, kind in ((k, PRESET_ONLY[k][0]) for k in overlay if k in PRESET_ONLY):
            value = overlay[key]
            if prefix[-1] == "*":
                layer.problems.append(ConfigProblem(key, self._where(lines, prefix + (key,)),
                                                    "a router-only key names one model, not every model"))
            elif (kind is bool and isinstance(value, bool)) or (kind is int and type(value) is int and value >= 0):
                out[key] = value
            else:
                expected = "a boolean" if kind is bool else "a whole number of seconds"
                layer.problems.append(ConfigProblem(key, self._where(lines, prefix + (key,)), f"expected {expected}",
                                                    value=str(value)))
        return out

    def _where(self, lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> str:
        line = lines.get(path)
        return f"toml:{self.path}:{line}" if line else f"toml:{self.path}"

    def _settings(self, items: dict[str, Any], prefix: tuple[str, ...], lines: dict[tuple[str, ...], int],
                  layer: Layer) -> dict[str, Setting]:
        out: dict[str, Setting] = {}
        for key, raw in items.items():
            where = self._where(lines, prefix + (key,))
            spec = lookup(self.table, key, env_names=False)
            if spec is None or (prefix and spec.name == "config"):
                layer.problems.append(unknown_key(self.table, key, where, "TOML key"))
                continue
            if spec.name == "config":
                layer.problems.append(ConfigProblem(key, where, "the TOML file cannot name another TOML file"))
                continue
            if isinstance(raw, dict):
                layer.problems.append(ConfigProblem(spec.name, where, "expected a value, not a table"))
                continue
            try:
                out[spec.name] = keyed_setting(spec, key, raw, where, native=True)
            except BadValue as exc:
                layer.problems.append(bad_value(spec, raw, where, exc))
        return out
