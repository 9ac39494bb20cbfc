"""The router's model events (``GET /models/sse``): each message to every reader, a reader that stops reading
dropped rather than the router held up."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from mlxd.daemon.router_entry import meta

if TYPE_CHECKING:
    from mlxd.daemon.router_entry import Entry
    from mlxd.engine import ServedModel

_PROGRESS = {"stages": ["text_model"], "current": "text_model"}


class PoolEvents:
    """The readers of the pool's events, and what is published to them."""

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[dict[str, Any] | None]] = set()

    def subscribe(self) -> "asyncio.Queue[dict[str, Any] | None]":
        """A queue of ``{"model", "event", "data"}`` messages; None means the stream ends (the daemon stops)."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: "asyncio.Queue[dict[str, Any] | None]") -> None:
        self._subscribers.discard(queue)

    def end_streams(self) -> None:
        """Close every event stream, so that a drain does not wait on readers that never finish."""
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(None)
            except asyncio.QueueFull:
                pass
        self._subscribers.clear()

    def publish(self, model: str, event: str, data: dict[str, Any]) -> None:
        """Send ``{"model", "event", "data"}`` to every reader."""
        message = {"model": model, "event": event, "data": data}
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:  # a reader that stopped reading loses events, not the router
                self._subscribers.discard(queue)

    # b10621's status messages of one model's life, as its router sends them.
    def loading(self, entry: "Entry") -> None:
        self.publish(entry.name, "model_status", {"status": "loading"})
        self.publish(entry.name, "status_change", {"status": "loading", "progress": {**_PROGRESS, "value": 0.0}})

    def loaded(self, entry: "Entry", served: "ServedModel") -> None:
        info = {"id": entry.name, "aliases": entry.aliases or [entry.name], "tags": list(entry.spec.config.tags or []),
                "object": "model", "created": int(served.loaded_at), "owned_by": "llamacpp", "meta": meta(served)}
        self.publish(entry.name, "status_change", {"status": "loading", "progress": {**_PROGRESS, "value": 1.0}})
        self.publish(entry.name, "status_change", {"status": "loaded", "info": info})

    def failed(self, entry: "Entry") -> None:
        self.publish(entry.name, "status_change", {"status": "unloaded", "failed": True})

    def unloaded(self, entry: "Entry") -> None:
        self.publish(entry.name, "status_change", {"status": "unloaded"})
