"""Every change of the serving state as a typed value, for the one writer's one path (design principle 3).

A trigger (a file edit, SIGHUP, the admin API, llama-server's management routes, the router's pool, idle sleep)
names what it wants as one of these; :meth:`mlxd.daemon.controller.Controller.change` takes the lock, checks
``If-Match``, plans, applies and commits it (or records why not). The configuration actions build a desired
configuration that is diffed against the running one; the runtime ones (pool, sleep, wake) change what runs
without changing the configuration, and commit a generation with the config hash unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mlxd.daemon.served import lora_overrides
from mlxd.errors import EngineError

if TYPE_CHECKING:
    from mlxd.config import Config
    from mlxd.engine import ServedModel
    from mlxd.daemon.pool_change import PoolChange
    from mlxd.daemon.router import ModelPool


@dataclass(frozen=True)
class Reread:
    """The files read again with the startup argv and environment; the admin layer stays on top."""


@dataclass(frozen=True)
class Patch:
    """``{option: value}`` laid over the running configuration as the admin layer (UNSET removes one)."""

    values: Mapping[str, Any]


@dataclass(frozen=True)
class Replace:
    """The whole admin layer replaced (options not named fall back to the files)."""

    values: Mapping[str, Any]


@dataclass(frozen=True)
class LoraScales:
    """The served model's server-wide LoRA scales (id -> scale; adapters not named get 0), as ``lora-scaled``."""

    scales: Mapping[int, float]

    def as_patch(self, config: "Config", model: "ServedModel | None") -> Patch:
        """The admin layer's ``lora-scaled`` (and what it replaces) giving ``model``'s adapters these scales; an
        unknown id or a non-finite scale raises."""
        if model is None:
            raise EngineError("no model is loaded: LoRA scales belong to a loaded model")
        return Patch(lora_overrides(config, model.worker.lora.check(dict(self.scales))))


@dataclass(frozen=True)
class PoolAction:
    """An explicit load or unload of a router model (``POST /models/load``, ``mlxd admin load/unload``)."""

    kind: Literal["load", "unload"]
    name: str
    wait: bool = True


@dataclass(frozen=True)
class PoolRequest:
    """A change the router's pool asks for itself: an on-demand load, a finished load, an idle unload."""

    pool: "ModelPool"
    change: "PoolChange"


@dataclass(frozen=True)
class Sleep:
    """Free the served model while ``still_idle`` agrees under the lock (--sleep-idle-seconds)."""

    still_idle: Callable[["ServedModel"], bool]


@dataclass(frozen=True)
class Wake:
    """Load the sleeping model again."""

    name: str


ConfigAction = Reread | Patch | Replace | LoraScales
Action = ConfigAction | PoolAction | PoolRequest | Sleep | Wake
