"""Admin overrides: ``{name: value}`` from the admin API (or a management route), laid over everything else.

Keys are any spelling without dashes, as in TOML; values are JSON values typed as in TOML. ``UNSET`` removes an
earlier override. Overrides live in memory; they are never written back to a file here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlxd.config.options import OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.sources.keys import bad_value, keyed_setting, lookup, unknown_key
from mlxd.config.values import UNSET, BadValue


HINTS = 5  # unknown names that get a did-you-mean


class AdminSource:
    """Reads one batch of overrides on top of the overrides already in force."""

    def __init__(self, overrides: Mapping[str, Any], table: OptionTable, *, current: Layer | None = None,
                 source: str = "admin") -> None:
        self.overrides = overrides
        self.table = table
        self.current = current
        self.source = source

    def read(self) -> Layer:
        layer = Layer("admin", dict(self.current.settings) if self.current else {})
        unknown = 0
        for key, raw in self.overrides.items():
            spec = lookup(self.table, key, env_names=False)
            if spec is None:
                # A did-you-mean for the first few only: each costs milliseconds on the event loop.
                unknown += 1
                layer.problems.append(unknown_key(self.table, key, self.source, hint_it=unknown <= HINTS))
                continue
            if raw is UNSET:
                layer.settings.pop(spec.name, None)
                continue
            try:
                layer.settings[spec.name] = keyed_setting(spec, key, raw, self.source, native=True)
            except BadValue as exc:
                layer.problems.append(bad_value(spec, raw, self.source, exc))
        return layer
