"""Diff two resolved configurations into a ChangePlan: which options changed, split into live and restart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxd.config.options import table
from mlxd.config.resolved import ResolvedConfig


@dataclass(frozen=True)
class Change:
    name: str
    old: Any
    new: Any
    live: bool


@dataclass(frozen=True)
class ChangePlan:
    """What a reconcile must do. Restart changes are reported as pending; the live part still applies."""

    live: tuple[Change, ...] = ()
    restart: tuple[Change, ...] = ()
    models_added: tuple[str, ...] = ()
    models_removed: tuple[str, ...] = ()
    models_changed: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)

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


def diff(old: ResolvedConfig, new: ResolvedConfig) -> ChangePlan:
    """The options whose values differ between ``old`` and ``new``, and the router models added, removed or
    changed."""
    live: list[Change] = []
    restart: list[Change] = []
    for spec in table():
        before, after = getattr(old.config, spec.field), getattr(new.config, spec.field)
        if before != after:
            (live if spec.live else restart).append(Change(spec.name, before, after, spec.live))
    added = tuple(sorted(set(new.models) - set(old.models)))
    removed = tuple(sorted(set(old.models) - set(new.models)))
    changed = tuple(sorted(name for name in set(old.models) & set(new.models)
                           if old.models[name].config != new.models[name].config
                           or old.models[name].extras != new.models[name].extras))
    return ChangePlan(tuple(live), tuple(restart), added, removed, changed)
