"""One loaded model where the daemon and the engine meet: what the daemon's loader builds, the owner swaps in, and
the routes serve from."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxd.config import Config
    from mlxd.engine.batching.worker import ModelWorker
    from mlxd.engine.chat import ChatTemplate
    from mlxd.engine.loading.loader import LoadedModel
    from mlxd.engine.sampling import SamplingParams


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
