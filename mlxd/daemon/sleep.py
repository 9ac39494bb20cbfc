"""``--sleep-idle-seconds`` for a single-model server: unload the model when idle, load it again on demand.

As b10621's sleeping server: after N seconds without a request that needs the model, the model is freed. While it
sleeps, ``/health`` and ``/metrics`` answer as usual and ``GET /props`` (``is_sleeping: true``), ``/models`` and ``/v1/models``
answer from what was cached when it fell asleep, without waking it; any other request wakes it and is served once
the model is loaded again. The option is read on every check, so a live change applies at once (-1 disables).
The router's per-model idle unload is ``mlxd.daemon.router.ModelPool``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from sanic import DefaultSanic, HTTPResponse, Request, Sanic

from mlxd.api import api_prefix, json_response
from mlxd.web import STORE_PREFIX

if TYPE_CHECKING:
    from mlxd.api import ServingState
    from mlxd.engine import ServedModel
    from mlxd.daemon.controller import Controller

# The bodies sleeping routes answer, taken from the model in service as it falls asleep (mlxd.api.sleeping_views).
Views = Callable[["ServingState", "ServedModel"], dict[str, dict[str, Any]]]

log = logging.getLogger("mlxd.daemon.sleep")

# Routes that answer while asleep without waking the model (and whose use does not count as activity).
HEALTH = ("/health", "/v1/health")
CACHED = ("/props", "/models", "/v1/models")
# Routes served while asleep from what the daemon keeps itself, without waking the model (b10621's bypass_sleep).
READ_ONLY = ("/metrics",)


class Sleeper:
    """Puts the served model to sleep when idle and wakes it for the next request that needs it."""

    def __init__(self, serving: "ServingState", controller: "Controller", views: Views) -> None:
        self.serving = serving
        self.controller = controller
        self.views = views
        self.last_active = time.monotonic()
        self._cached: dict[str, dict[str, Any]] = {}
        self._name = ""
        # Requests that need the model, from the sleep gate until their response starts (weak: one whose client
        # went away before a response is forgotten with it).
        self.pending: weakref.WeakSet[Request] = weakref.WeakSet()

    @property
    def idle_seconds(self) -> int:
        return int(self.serving.config.sleep_idle_seconds)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    async def watch(self) -> None:
        """The idle check, for as long as the daemon serves."""
        while True:
            limit = self.idle_seconds
            await asyncio.sleep(min(1.0, limit / 4) if limit > 0 else 1.0)
            model = self.serving.model
            if model is None or self.serving.sleeping:
                continue
            if model.worker.n_in_flight or len(self.pending):
                self.touch()  # a request is on its way to the model, or a generation (a stream, say) still runs
            elif limit > 0 and time.monotonic() - self.last_active >= limit:
                # Shielded: stopping the daemon must not abandon a model half freed (the drain takes the
                # controller's lock, so it waits for this to land).
                await asyncio.shield(self.sleep())

    async def sleep(self) -> None:
        """Cache what sleeping routes answer, and ask the controller to take the model out of service."""

        def still_idle(served: "ServedModel") -> bool:
            if served.worker.n_in_flight or len(self.pending):
                return False
            self._cached = self.views(self.serving, served)
            return True

        name = await self.controller.sleep(still_idle)
        if name is not None:
            self._name = name
            log.info("model %s unloaded after %d s idle; sleeping until the next request", name, self.idle_seconds)

    async def wake(self) -> None:
        """Load the model again through the controller (once, however many requests wait for it)."""
        await self.controller.wake(self._name)
        self.touch()

    async def on_request(self, request: Request) -> HTTPResponse | None:
        """After the key check: answer from the cache, or wake the model, or just note the activity."""
        path = request.path
        prefix = api_prefix(self.serving.config)
        if prefix and path.startswith(prefix):
            path = path[len(prefix):]
        if (request.method == "OPTIONS" or request.route is None or path in HEALTH or path in READ_ONLY
                or path.startswith(STORE_PREFIX)):
            # a preflight, an unknown route (404), a health check and the chat page's store never wake the model
            return None
        if path in CACHED and request.method == "GET":
            asleep = self.serving.sleeping and self.serving.model is None
            cached = self._cached.get(path) if asleep else None
            return json_response(cached) if cached is not None else None
        self.touch()
        self.pending.add(request)
        if self.serving.sleeping:
            # Shielded: a client that goes away must not abandon a load half way (its worker would be lost).
            await asyncio.shield(self.wake())
            self.touch()
        return None


def install(app: DefaultSanic, serving: "ServingState") -> None:
    """Route every request through the serving state's sleeper, when it has one (after the API key check)."""

    async def sleep_gate(request: Request) -> HTTPResponse | None:
        sleeper = getattr(serving, "sleeper", None)
        return await sleeper.on_request(request) if sleeper is not None else None

    async def done(request: Request, response: HTTPResponse) -> None:
        sleeper = getattr(serving, "sleeper", None)
        if sleeper is not None and request in sleeper.pending:
            sleeper.pending.discard(request)
            sleeper.touch()

    app.on_request(sleep_gate, priority=50)
    app.on_response(done, priority=50)
