"""The built-in defaults: every option at its typed default."""

from __future__ import annotations

import copy

from mlxd.config.options import OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.values import Setting


class DefaultsSource:
    """Every option's default, with provenance ``default``."""

    def __init__(self, table: OptionTable) -> None:
        self.table = table

    def read(self) -> Layer:
        return Layer("defaults", {s.name: Setting(copy.copy(s.default), "default") for s in self.table})
