"""Diff two resolved configurations into a ChangePlan: which options changed, and what the change must do.

What a change does comes from the option table: each row's ``effects`` (facts.EFFECTS: live, template, reload,
adapters, pool, logging, restart). The plan's effects are the union over the changed options; the reconcile
path executes them and keeps no list of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxd.config.model import Config
from mlxd.config.options import table
from mlxd.config.resolved import ResolvedConfig


@dataclass(frozen=True)
class Change:
    name: str
    old: Any
    new: Any
    live: bool
    effects: tuple[str, ...] = ("live",)


@dataclass(frozen=True)
class ChangePlan:
    """What a reconcile must do. Restart changes are reported as pending; the live part still applies."""

    live: tuple[Change, ...] = ()
    restart: tuple[Change, ...] = ()
    models_added: tuple[str, ...] = ()
    models_removed: tuple[str, ...] = ()
    models_changed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.live or self.restart or self.models_added or self.models_removed or self.models_changed)

    @property
    def needs_restart(self) -> bool:
        return bool(self.restart)

    @property
    def changed(self) -> tuple[str, ...]:
        """Names of every changed option."""
        return tuple(c.name for c in self.live + self.restart)

    @property
    def effects(self) -> frozenset[str]:
        """Every effect the change has (``pool`` too when the router's models changed)."""
        out = {e for c in self.live + self.restart for e in c.effects}
        if self.models_added or self.models_removed or self.models_changed:
            out.add("pool")
        return frozenset(out)

    def has(self, effect: str) -> bool:
        return effect in self.effects


def config_changes(old: Config, new: Config) -> list[Change]:
    """The options whose values differ between two Configs, with each option's effects."""
    out = []
    for spec in table():
        before, after = old.value(spec.field), new.value(spec.field)
        if before != after:
            out.append(Change(spec.name, before, after, spec.live, spec.effects))
    return out


def model_plan(old: Config, new: Config) -> ChangePlan:
    """The plan for one router model whose Config changed (the router executes it as the server does)."""
    changes = config_changes(old, new)
    return ChangePlan(tuple(c for c in changes if c.live), tuple(c for c in changes if not c.live))


def diff(old: ResolvedConfig, new: ResolvedConfig) -> ChangePlan:
    """The options whose values differ between ``old`` and ``new``, and the router models added, removed or
    changed."""
    changes = config_changes(old.config, new.config)
    added = tuple(sorted(set(new.models) - set(old.models)))
    removed = tuple(sorted(set(old.models) - set(new.models)))
    changed = tuple(sorted(name for name in set(old.models) & set(new.models)
                           if old.models[name].config != new.models[name].config
                           or old.models[name].extras != new.models[name].extras))
    return ChangePlan(tuple(c for c in changes if c.live), tuple(c for c in changes if not c.live), added, removed,
                      changed)
