"""One model the router knows of (its state, its load and drain in progress), and the facts the pool reports of it.

mlxd.daemon.router.ModelPool holds these records; only it changes them, as its owner's changes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxd.errors import Unavailable
from mlxd.schemas.admin import ModelStateName

if TYPE_CHECKING:
    from mlxd.engine import ServedModel
    from mlxd.config import ModelResolved, ResolvedConfig

DEFAULT_STOP_TIMEOUT = 10  # seconds a stopping model's requests may take (preset key stop-timeout, rule 2.8)


class ModelLimit(Unavailable):
    """Every slot under --models-max is held by a model that is loading, or busy and not evictable yet.

    b10621 answers this with a 500 ("model limit reached, try again later"); the condition is transient, and a 500
    tells a client not to retry, so mlxd answers 503 with ``Retry-After`` (the manifest's models-max entry), after a
    request has waited --models-wait-timeout for room."""

    retry_after = 1


@dataclass(eq=False)
class Entry:
    """One model the router knows of."""

    spec: "ModelResolved"
    state: ModelStateName = "unloaded"
    error: str | None = None
    served: "ServedModel | None" = None
    last_used: int = 0  # LRU tick: POST requests and loads
    last_active: float = field(default_factory=time.monotonic)  # any request: idle unload
    leases: int = 0  # requests that hold the served model but may not have reached its worker yet
    waiters: int = 0  # requests waiting for the model to load (it is not idle, and not evicted, while they wait)
    task: "asyncio.Task[None] | None" = None  # the load in progress, as requests wait for it
    thread: "asyncio.Task[ServedModel] | None" = None  # its weights being read (done: waiting to be settled)
    trigger: str = ""  # what started the load in progress (the generation it commits names it)
    started: float = 0.0
    stopping: "asyncio.Task[None] | None" = None  # the drain in progress

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def aliases(self) -> list[str]:
        return list(self.spec.config.alias or [])

    @property
    def running(self) -> bool:
        """b10621's "running": loading or loaded."""
        return self.state in ("loading", "loaded")

    def idle_now(self) -> bool:
        """No request holds the model or waits for it, and its worker has nothing in flight: evicting it cuts
        nothing (a model that just loaded for waiting requests is theirs first, or churn evicts it unused)."""
        return self.waiters == 0 and self.idle_for(0.0)

    def idle_for(self, seconds: float) -> bool:
        """Loaded, unheld, nothing in flight, and no request for ``seconds``."""
        return (self.state == "loaded" and self.served is not None and self.leases == 0
                and self.served.worker.n_in_flight == 0 and time.monotonic() - self.last_active >= seconds)


class RoomSignal:
    """Requests waiting for room under --models-max, woken when the pool changes (a load finishes, a model drains, a
    request lets one go)."""

    def __init__(self) -> None:
        self._changed: asyncio.Future[None] | None = None

    def notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    async def wait(self, deadline: float, refused: ModelLimit) -> None:
        """Wait for a change, at most until ``deadline``; past it, ``refused`` is raised (503 with Retry-After). A
        worker finishing its last request does not notify, so the wait also looks again every 100 ms."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise refused
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._changed], timeout=min(remaining, 0.1))


def visible(resolved: "ResolvedConfig") -> dict[str, "ModelResolved"]:
    """The router's models less the store entries that a model with ``dedup-cache-models`` serves already (its
    ``hf-repo`` names the same repository; rule 2.8)."""
    hidden = {m.config.hf_repo for m in resolved.models.values()
              if m.extras.get("dedup-cache-models") and m.config.hf_repo}
    return {name: m for name, m in resolved.models.items() if not (m.source == "store" and name in hidden)}


def meta(served: "ServedModel") -> dict[str, Any]:
    """The loaded model's facts as b10621's ``meta`` object."""
    from mlxd.api import ftype, n_embd

    loaded = served.loaded
    return {"vocab_type": True, "n_vocab": loaded.vocab_size, "n_ctx": served.worker.n_ctx_slot,
            "n_ctx_train": loaded.n_ctx_train, "n_embd": n_embd(served), "n_params": loaded.n_params,
            "size": loaded.size_bytes, "ftype": ftype(served)}
