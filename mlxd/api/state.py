"""What the public routes serve from: the resolved configuration and the model currently in service.

The daemon builds a ``ServingState``; its owner (mlxd.daemon.controller.Controller, the one writer) swaps its
``model``, ``pool``, ``config`` and ``sleeping`` when a change is committed. Routes read it per request, never hold
on to a model across awaits longer than the request that uses it, and ask the owner for every change through the
:class:`ServingOwner` protocol (the api does not import the daemon).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence

    from mlxd.config import Config, ModelResolved
    from mlxd.config.change import ChangeResult
    from mlxd.engine import ServedModel


class ServingOwner(Protocol):
    """The one writer of the serving state, as the public routes reach it (mlxd.daemon.controller.Controller)."""

    generation: int
    last_result: str  # the last change's outcome: none, committed, unchanged, refused

    async def set_lora_scales(self, scales: dict[int, float], *, trigger: str,
                              if_match: str | None = ...) -> "ChangeResult": ...

    async def reload(self, trigger: str = ..., *, dry_run: bool = ...) -> "ChangeResult": ...

    async def load_pool_model(self, name: str, *, trigger: str, wait: bool = ...) -> "ChangeResult": ...

    async def unload_pool_model(self, name: str, *, trigger: str) -> "ChangeResult": ...


class PoolEntry(Protocol):
    """One router model as the routes read it (mlxd.daemon.router_entry.Entry); read-only, so the pool's own narrower
    types (its state is a ModelStateName) satisfy it."""

    @property
    def spec(self) -> "ModelResolved": ...

    @property
    def state(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def served(self) -> "ServedModel | None": ...

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> list[str]: ...


class RouterPool(Protocol):
    """The router's models as the routes use them (mlxd.daemon.router.ModelPool); changes go through the owner."""

    models_max: int
    autoload: bool

    def entries(self) -> "Sequence[PoolEntry]": ...

    def canonical(self, name: str) -> str | None: ...

    async def acquire(self, name: str | None, autoload: bool | None, *, touch: bool) -> "ServedModel": ...

    def release(self, served: "ServedModel") -> None: ...

    def subscribe(self) -> "asyncio.Queue[dict[str, Any] | None]": ...

    def unsubscribe(self, queue: "asyncio.Queue[dict[str, Any] | None]") -> None: ...


class SleepGate(Protocol):
    """--sleep-idle-seconds as requests meet it (mlxd.daemon.sleep.Sleeper)."""

    pending: Any

    def touch(self) -> None: ...


@dataclass
class ServingState:
    """Everything a public route may read. ``model`` is None until the default model is loaded (routes answer 503)."""

    config: "Config"
    model: "ServedModel | None" = None
    started_at: float = field(default_factory=time.time)
    # Set by the daemon: an object with the prometheus registry and mlxd's counters (see mlxd.api.metrics).
    metrics: Any = None
    # Free-form facts for /props and the log (e.g. the BLAS report).
    build_info: dict[str, Any] = field(default_factory=dict)
    # The owner of this state, for llama-server's management routes (POST /lora-adapters, /models/load ...), which
    # change state through the same path as the admin API; None for an app served without its daemon.
    controller: ServingOwner | None = None
    # Router mode (no model argument): the daemon's model pool, None otherwise. Requests name their model;
    # ``acquire(name, autoload, touch=...)`` returns it loaded and ``release(model)`` ends the request's hold on it
    # (mlxd.api.router_mode does both around every request that names a model).
    pool: RouterPool | None = None
    # --sleep-idle-seconds (single-model): the daemon's sleeper, and whether the model is asleep (unloaded until a
    # request wakes it; ``model`` is None meanwhile).
    sleeper: SleepGate | None = None
    sleeping: bool = False

    @property
    def ready(self) -> bool:
        """Whether requests may be served: a model is in service or asleep (a request wakes it), or the router is
        (it loads models on demand)."""
        return self.model is not None or self.pool is not None or self.sleeping
