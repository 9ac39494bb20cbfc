"""The router pool's own changes as typed values, and the owner that makes them (design principle 3).

A request that names an unloaded model, a load whose thread finished, and a model idle past its
``sleep-idle-seconds`` all change which models run. The pool does not make those changes itself: it asks its
owner (mlxd.daemon.controller.Controller) with a :class:`PoolChange`; the owner takes its lock, lets the pool
execute the change (:meth:`ModelPool.execute`), and commits each :class:`PoolStep` the pool reports as a generation
(or records a failed load as refused). tests/unit/test_architecture.py holds the pool to that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from mlxd.daemon.router import ModelPool
    from mlxd.schemas.admin import ModelStateName


@dataclass(frozen=True)
class PoolChange:
    """``load``: start loading a model a request needs (making room first); ``settle``: a load's thread finished,
    install its model or record its failure; ``idle``: unload a model idle for its sleep-idle-seconds."""

    kind: Literal["load", "settle", "idle"]
    name: str
    trigger: str


@dataclass(frozen=True)
class PoolStep:
    """What one executed change did to one model, for the owner to commit: ``state`` is the model's new state
    (loaded, unloaded, failed); ``error`` is set for a failed load (a refused change: nothing else moved)."""

    trigger: str
    name: str
    state: str
    error: str | None = None


class PoolOwner(Protocol):
    """The one writer, as the pool reaches it."""

    async def pool_change(self, pool: "ModelPool", change: PoolChange) -> None: ...

    def model_state(self, name: str, state: "ModelStateName", error: str | None = None) -> None: ...
