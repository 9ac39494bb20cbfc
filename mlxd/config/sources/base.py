"""What a source returns: settings with provenance, plus the problems and warnings it found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxd.config.values import Setting
from mlxd.errors import ConfigProblem


@dataclass
class Layer:
    """One source's partial document: only the options it mentions (an absent name is UNSET)."""

    name: str  # "defaults", "config.ini", "toml", "env", "cli", "admin"
    settings: dict[str, Setting] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Per-model overlays this source defines (TOML [models.NAME]), model name -> settings.
    models: dict[str, dict[str, Setting]] = field(default_factory=dict)
    # Their router-only keys (load-on-startup, stop-timeout, dedup-cache-models), model name -> values.
    model_extras: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def accumulates(self) -> bool:
        """Whether list values of accumulating options add to the layer below (docs/precedence.md rule 1.4)."""
        return self.name in ("env", "cli")
