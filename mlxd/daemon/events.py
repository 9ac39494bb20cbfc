"""A small fan-out of change events to every subscriber (admin SSE, /models/sse), bounded per subscriber."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from typing import Any, AsyncIterator

_QUEUE_MAX = 256


class EventBus:
    """Publishes dict events; a slow subscriber loses its oldest events rather than blocking the daemon."""

    def __init__(self, history: int = 64) -> None:
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._ids = itertools.count(1)
        self.recent: deque[dict[str, Any]] = deque(maxlen=history)

    def publish(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"id": next(self._ids), "type": kind, "time": time.time(), **fields}
        self.recent.append(event)
        for queue in list(self._subscribers):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)
        return event

    async def subscribe(self) -> AsyncIterator[dict[str, Any]]:
        """Yields every event published from now on until the consumer stops iterating."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_QUEUE_MAX)
        self._subscribers.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.discard(queue)
