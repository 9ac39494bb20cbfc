"""What the public routes serve from: the resolved configuration and the model currently in service.

The daemon builds a ``ServingState`` and swaps its ``model`` when the pool changes; routes read it per request and
never hold on to a model across awaits longer than the request that uses it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxd.config import Config
    from mlxd.engine.chat import ChatTemplate
    from mlxd.engine.loader import LoadedModel
    from mlxd.engine.sampling import SamplingParams
    from mlxd.engine.worker import ModelWorker


@dataclass
class ServedModel:
    """One loaded model as the routes see it."""

    name: str  # the id clients send as "model" and see in /v1/models (first alias in sorted order, else the path)
    aliases: list[str]
    loaded: "LoadedModel"
    worker: "ModelWorker"
    chat_template: "ChatTemplate | None"
    sampling_defaults: "SamplingParams"
    loaded_at: float = field(default_factory=time.time)
    # Router mode: the model's own configuration (preset, models-dir, store); None when the server's applies.
    config: "Config | None" = None


@dataclass
class ServingState:
    """Everything a public route may read. ``model`` is None until the default model is loaded (routes answer 503)."""

    config: "Config"
    model: ServedModel | None = None
    started_at: float = field(default_factory=time.time)
    # Set by the daemon: an object with the prometheus registry and mlxd's counters (see mlxd.api.metrics).
    metrics: Any = None
    # Free-form facts for /props and the log (e.g. the BLAS report).
    build_info: dict[str, Any] = field(default_factory=dict)
    # The daemon's reconcile controller (mlxd.daemon.controller.Controller), for llama-server's management routes
    # (POST /lora-adapters, /models/load ...) which change state through the same path as the admin API.
    controller: Any = None
    # Router mode (no model argument): the daemon's model pool (mlxd.daemon.router.ModelPool), None otherwise.
    # Requests name their model; ``acquire(name, autoload, touch=...)`` returns it loaded and ``release(model)``
    # ends the request's hold on it (mlxd.api.router_mode does both around every request that names a model).
    pool: Any = None
    # --sleep-idle-seconds (single-model): the daemon's mlxd.daemon.sleep.Sleeper, and whether the model is asleep
    # (unloaded until a request wakes it; ``model`` is None meanwhile).
    sleeper: Any = None
    sleeping: bool = False

    @property
    def ready(self) -> bool:
        """Whether requests may be served: a model is in service or asleep (a request wakes it), or the router is
        (it loads models on demand)."""
        return self.model is not None or self.pool is not None or self.sleeping
