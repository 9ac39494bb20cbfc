"""The result of resolution: the frozen Config, each value's provenance, the content hash, the router's models."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from mlxd.config.model import Config
from mlxd.config.options import field_name, table
from mlxd.config.values import Setting, is_default


def config_hash(config: Config) -> str:
    """A content hash of a Config: equal values give equal hashes."""
    blob = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def build_config(settings: dict[str, Setting]) -> Config:
    return Config(**{field_name(name): s.value for name, s in settings.items()})


@dataclass(frozen=True)
class ModelResolved:
    """One router model: its Config, each value's provenance, where the model was defined, preset-only keys."""

    name: str
    source: str  # "store", "models-dir", "preset", "toml"
    config: Config
    provenance: dict[str, str]
    extras: dict[str, Any] = field(default_factory=dict)  # load-on-startup, stop-timeout, dedup-cache-models

    def explicit(self, name: str) -> bool:
        return not is_default(self.provenance[name])


@dataclass(frozen=True)
class ResolvedConfig:
    """A resolved configuration. ``provenance[name]`` is ``default``, ``ini:PATH:LINE``, ``toml:PATH:LINE``,
    ``env:NAME``, ``cli:SPELLING``, ``preset:[SECTION]``, ``admin``; for a router model's path also ``store`` or
    ``models-dir:PATH``; for a value b10621 derives from another option, ``derived:<that option's source>``; for an
    mlxd default that depends on another option, ``default:--OPTION``."""

    config: Config
    provenance: dict[str, str]
    config_hash: str
    is_router: bool
    models: dict[str, ModelResolved]
    warnings: tuple[str, ...] = ()
    # What it was built from, so that overrides can be layered on top (mlxd.config.layering.Sources).
    sources: Any = field(default=None, repr=False, compare=False)

    def explicit(self, name: str) -> bool:
        """Whether option ``name`` was set by some source rather than left at its default (or at a default that
        follows from another option, ``default:--config``)."""
        return not is_default(self.provenance[name])

    @property
    def files(self) -> tuple[str, ...]:
        """Every configuration file this was read from (config.ini files, the TOML file, the presets file): what a
        reload on change watches."""
        return tuple(self.sources.files) if self.sources is not None else ()

    def value(self, name: str) -> Any:
        """The value of option ``name`` (any canonical name)."""
        return self.config.value(table().get(name).field)

    def settings(self) -> dict[str, Setting]:
        return {name: Setting(self.value(name), source) for name, source in self.provenance.items()}
