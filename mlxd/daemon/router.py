"""The router's model pool: several models by name, loaded on demand, at most ``--models-max`` at once.

b10621's router semantics (docs/precedence.md rules 2.8, 2.16, 2.17), served in one process: each model is a
ServedModel with its own worker thread instead of a child process. A model is ``unloaded``, ``loading``,
``loaded``, ``draining`` (its in-flight requests finish before it is freed) or ``failed`` (with the error; the rest
of the pool is untouched). Loading runs on a worker thread; requests for a model that is loading wait for it.
Least recently used models are evicted when a load would exceed ``--models-max``; only POST requests and loads
refresh last use, as upstream. A request's on-demand load evicts only a model that is idle (no request holds it, its
worker has nothing in flight), so no stream is cut to make room; when none is, because every model under the cap is
loading, draining or busy, the request waits for room up to ``--models-wait-timeout`` seconds and then gets 503 with
``Retry-After`` (b10621 answers 500 at once: the manifest's models-max entry records the difference). A management
load (``POST /models/load``, the admin API) still drains the least recently used busy model when no model is idle.
A model idle for its ``sleep-idle-seconds`` is unloaded.

Each model's record is a router_entry.Entry; the ``GET /models/sse`` readers are router_events.PoolEvents.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from mlxd.daemon.pool_change import PoolChange, PoolOwner, PoolStep
from mlxd.daemon.router_entry import DEFAULT_STOP_TIMEOUT, Entry, ModelLimit, RoomSignal, visible
from mlxd.daemon.router_events import PoolEvents
from mlxd.engine import release_freed_memory
from mlxd.errors import EngineError, InvalidRequest, MlxdError, Unavailable
from mlxd.schemas.admin import ModelStateName

if TYPE_CHECKING:
    from mlxd.engine import ServedModel
    from mlxd.config import ModelResolved, ResolvedConfig

log = logging.getLogger("mlxd.daemon.router")

IDLE_CHECK_SECONDS = 1.0


class ModelPool:
    """The router's models. Every method runs on the event loop; MLX work happens on worker threads.

    Which models run is changed only by the owner (mlxd.daemon.controller.Controller): the management methods
    (:meth:`load`, :meth:`unload`, :meth:`apply`, :meth:`start`, :meth:`close`) are called by it, and what the
    pool starts itself (an on-demand load, a finished load, an idle unload) is a :class:`PoolChange` that the
    owner executes under its lock and commits. Lock discipline: the owner's lock is held only to decide and to
    install (make room, start a load's thread; install or fail the finished load), never while a model's weights
    are read, so admin reads, other requests and a concurrent reload are not held up by a load. A request that
    waits for a model waits on that model's load task alone; a change under the lock that must wait for a load
    (a reload, an unload) waits for its thread only, and settles it itself, so it never waits for the lock it
    holds.
    """

    def __init__(self, resolved: "ResolvedConfig", load_one: Callable[["ModelResolved"], "ServedModel"],
                 owner: PoolOwner | None = None) -> None:
        self.load_one = load_one
        self.owner = owner
        self.models_max = int(resolved.config.models_max)
        self.autoload = bool(resolved.config.models_autoload)
        self.wait_timeout = float(resolved.config.models_wait_timeout)
        self.created = int(time.time())
        self._entries: dict[str, Entry] = {name: Entry(spec) for name, spec in visible(resolved).items()}
        self._tick = itertools.count(1)
        self.events = PoolEvents()
        self._idle_task: asyncio.Task[None] | None = None
        self._steps: list[PoolStep] = []  # what the changes executed since the owner last took them did
        self._closed = False  # the daemon is stopping: nothing new is loaded
        self._room = RoomSignal()

    # -- names ------------------------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def canonical(self, name: str) -> str | None:
        """The model a name or alias refers to (rule 2.16), or None."""
        if name in self._entries:
            return name
        return next((entry.name for entry in self._entries.values() if name in entry.aliases), None)

    # -- requests ---------------------------------------------------------------------------------------------
    async def acquire(self, name: str | None, autoload: bool | None, *, touch: bool) -> "ServedModel":
        """The model a request names, loaded (autoload permitting); release it with :meth:`release`."""
        if not name:
            raise InvalidRequest("model name is missing from the request")
        canonical = self.canonical(name)
        if canonical is None:
            raise InvalidRequest(f"model '{name}' not found")
        entry = self._entries[canonical]
        if entry.state != "loaded" and not (self.autoload if autoload is None else autoload):
            raise InvalidRequest("model is not loaded")
        if touch:
            entry.last_used = next(self._tick)
        entry.waiters += 1
        try:
            served = await self._ensure_loaded(entry)
        finally:
            entry.waiters -= 1
        entry.leases += 1
        entry.last_active = time.monotonic()
        return served

    def release(self, served: "ServedModel") -> None:
        """A request is done with (or has submitted its work to) ``served``."""
        entry = self._entries.get(served.name)
        if entry is not None and entry.served is served and entry.leases > 0:  # not a late release of an old load
            entry.leases -= 1
            entry.last_active = time.monotonic()
            self._room.notify()

    # -- changes, executed by the owner under its lock ---------------------------------------------------------
    async def execute(self, change: PoolChange) -> None:
        """Carry out a change the pool asked its owner for; what it did is in :meth:`take_steps`."""
        entry = self._entries.get(change.name)
        if entry is None:
            if change.kind == "load":
                raise InvalidRequest(f"model '{change.name}' not found")
            return  # removed by a configuration change meanwhile
        if change.kind == "load":
            if entry.task is None and entry.state != "loaded" and entry.stopping is None:
                await self._make_room(entry, idle_only=True)
                self._start_load(entry, change.trigger)
        elif change.kind == "settle":
            self._settle(entry)
        elif change.kind == "idle":
            idle = int(entry.spec.config.sleep_idle_seconds)
            if idle > 0 and entry.idle_for(idle):
                await self._stop(entry, f"idle for {idle} s", trigger=change.trigger)

    def take_steps(self) -> list[PoolStep]:
        """What the executed changes did since the last call (the owner commits each)."""
        steps, self._steps = self._steps, []
        return steps

    async def _change(self, change: PoolChange) -> None:
        if self.owner is None:
            raise MlxdError("the router's pool changes only through its owner, which this pool lacks")
        await self.owner.pool_change(self, change)

    # -- management (POST /models/load, /models/unload, the admin API; called by the owner) --------------------
    async def load(self, name: str, *, wait: bool = False, trigger: str = "load") -> str:
        """Start loading a model (evicting the least recently used one if needed); returns its canonical name.

        Raises InvalidRequest when the name is unknown or the model is already running; with ``wait``, the load's
        own error when it fails."""
        canonical = self.canonical(name)
        if canonical is None:
            raise InvalidRequest("model is not found")
        entry = self._entries[canonical]
        if entry.running:
            raise InvalidRequest("model is already running")
        entry.last_used = next(self._tick)
        if entry.stopping is not None:
            await asyncio.shield(entry.stopping)
        await self._make_room(entry)
        self._start_load(entry, trigger)
        if wait:
            thread = entry.thread
            await self._await_thread(entry)
            error = thread.exception() if thread is not None and not thread.cancelled() else None
            if error is not None:
                raise error
        return canonical

    async def unload(self, name: str, *, trigger: str = "unload") -> str:
        """Stop a running model (its in-flight requests finish first); returns its canonical name."""
        canonical = self.canonical(name)
        if canonical is None:
            raise InvalidRequest("model is not found")
        entry = self._entries[canonical]
        if not entry.running:
            raise InvalidRequest("model is not running")
        await self._await_thread(entry)
        if entry.state == "loaded":
            await self._stop(entry, "unload", trigger=trigger)
        return canonical

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the ``load-on-startup`` models (more than --models-max of them is an error, rule 2.8) and start
        the idle watch."""
        wanted = [e for e in self._entries.values() if e.spec.extras.get("load-on-startup")]
        if self.models_max > 0 and len(wanted) > self.models_max:
            raise MlxdError(f"{len(wanted)} models have load-on-startup, more than --models-max "
                            f"{self.models_max}")
        for entry in wanted:
            await self.load(entry.name, wait=True, trigger="startup")
        self._idle_task = asyncio.get_running_loop().create_task(self._watch_idle())

    async def close(self, timeout: float) -> None:
        """Stop every model (the daemon is stopping)."""
        self._closed = True
        if self._idle_task is not None:
            self._idle_task.cancel()
        for entry in list(self._entries.values()):
            await self._await_thread(entry)
        # Models already draining (evicted, idle, reloaded) are waited for too: no worker may outlive the pool.
        draining = [asyncio.shield(e.stopping) for e in self._entries.values() if e.stopping is not None]
        await asyncio.gather(*(self._stop(e, "shutdown", timeout) for e in self._entries.values()
                               if e.state == "loaded"), *draining, return_exceptions=True)

    async def apply(self, desired: "ResolvedConfig") -> None:
        """A committed configuration change, executed by the controller: models added, removed or changed (rule
        2.17: running models whose definition changed or went away are unloaded; the new definition loads on next
        use). Whether a definition changed is the same diff the server's own configuration goes through."""
        from mlxd.config.diff import model_plan

        self.models_max = int(desired.config.models_max)
        self.autoload = bool(desired.config.models_autoload)
        self.wait_timeout = float(desired.config.models_wait_timeout)
        models = visible(desired)
        for name, entry in list(self._entries.items()):
            spec = models.get(name)
            if spec is not None and model_plan(entry.spec.config, spec.config).empty \
                    and spec.extras == entry.spec.extras:
                entry.spec = spec
                continue
            await self._await_thread(entry)
            if entry.state == "loaded":
                log.info("(reload) unloading model name=%s (source updated or removed)", name)
                await self._stop(entry, "reload")
            if spec is None:
                del self._entries[name]
                self.events.publish(name, "model_remove", {})
            else:
                entry.spec, entry.error = spec, None
                if entry.state == "failed":
                    entry.state = "unloaded"
        for name, spec in models.items():
            if name not in self._entries:
                self._entries[name] = Entry(spec)
        self.events.publish("", "models_reload", {})

    # -- events (GET /models/sse) -----------------------------------------------------------------------------
    def subscribe(self) -> "asyncio.Queue[dict[str, Any] | None]":
        """A queue of ``{"model", "event", "data"}`` messages; None means the stream ends (the daemon stops)."""
        return self.events.subscribe()

    def unsubscribe(self, queue: "asyncio.Queue[dict[str, Any] | None]") -> None:
        self.events.unsubscribe(queue)

    def end_streams(self) -> None:
        """Close every event stream, so that a drain does not wait on readers that never finish."""
        self.events.end_streams()

    # -- internals --------------------------------------------------------------------------------------------
    def _set(self, entry: Entry, state: ModelStateName, error: str | None = None) -> None:
        entry.state, entry.error = state, error
        self._room.notify()
        if self.owner is not None:
            self.owner.model_state(entry.name, state, error)

    async def _ensure_loaded(self, entry: Entry) -> "ServedModel":
        deadline: float | None = None
        while True:
            if entry.state == "loaded" and entry.served is not None:
                return entry.served
            stopping = entry.stopping
            if stopping is not None:
                if stopping.done():
                    # The drain ended, and the _stop awaiting it clears ``stopping`` once it resumes: awaiting the
                    # finished task again returns without yielding, and this loop would hold the event loop, and
                    # that _stop, forever (a 2-minute freeze under router churn). Yield to it instead.
                    await asyncio.sleep(0.01)
                else:
                    await asyncio.shield(stopping)
                continue
            task = entry.task
            if task is None:
                # The owner decides (room, start) under its lock and commits; the wait below is outside it.
                try:
                    await self._change(PoolChange("load", entry.name, "router:on-demand"))
                except ModelLimit as exc:
                    if deadline is None:
                        deadline = time.monotonic() + self.wait_timeout
                        log.info("model name=%s waits for room under --models-max %d", entry.name,
                                 self.models_max)
                    await self._room.wait(deadline, exc)
                continue
            try:
                await asyncio.shield(task)
            except MlxdError as exc:
                raise EngineError(f"model name={entry.name} failed to load") from exc
            if entry.task is task:  # finished but not settled yet: the same hazard as a finished drain
                await asyncio.sleep(0.01)

    def _start_load(self, entry: Entry, trigger: str) -> None:
        if self._closed:
            raise Unavailable(f"model name={entry.name} is not loaded and the server is stopping")
        self._set(entry, "loading")
        entry.trigger = trigger
        self.events.loading(entry)
        loop = asyncio.get_running_loop()
        entry.started = time.monotonic()
        thread = loop.create_task(asyncio.to_thread(self.load_one, entry.spec))
        thread.add_done_callback(lambda t: t.cancelled() or t.exception())  # read by _settle
        task = loop.create_task(self._load(entry, thread))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # failures are recorded on the entry
        entry.thread, entry.task = thread, task

    async def _load(self, entry: Entry, thread: "asyncio.Task[ServedModel]") -> None:
        """A load as requests wait for it: the weights are read on a thread, then the owner installs the model
        (a no-op when a change under the lock settled it first); the load's own error is raised."""
        await asyncio.gather(asyncio.shield(thread), return_exceptions=True)
        if entry.thread is thread:
            await self._change(PoolChange("settle", entry.name, entry.trigger))
        thread.result()  # raises the load's error for the requests waiting for it

    async def _await_thread(self, entry: Entry) -> None:
        """Wait for a load in progress to read its weights, and settle it (called under the owner's lock)."""
        thread = entry.thread
        if thread is not None:
            await asyncio.gather(asyncio.shield(thread), return_exceptions=True)
            self._settle(entry)

    def _settle(self, entry: Entry) -> None:
        """Install a finished load's model, or mark the entry failed with its error (nothing else changes)."""
        thread = entry.thread
        if thread is None or not thread.done():
            return
        entry.thread, entry.task = None, None
        error = "the load was cancelled" if thread.cancelled() else thread.exception()
        if error is not None:
            log.error("model name=%s failed to load: %s", entry.name, error)
            self._set(entry, "failed", str(error))
            self.events.failed(entry)
            self._steps.append(PoolStep(entry.trigger, entry.name, "failed", str(error)))
            return
        served = thread.result()  # installed even when the pool is closing: close() then stops it with the rest
        entry.served = served
        entry.last_active = time.monotonic()
        self._set(entry, "loaded")
        self._steps.append(PoolStep(entry.trigger, entry.name, "loaded"))
        log.info("model name=%s loaded in %.2f s", entry.name, time.monotonic() - entry.started)
        self.events.loaded(entry, served)

    async def _make_room(self, incoming: Entry, *, idle_only: bool = False) -> None:
        """Evict least recently used models until ``incoming`` fits under --models-max (called under the owner's
        lock; each eviction is a step of its own, committed even when the load that follows fails). An idle model
        goes first; with ``idle_only`` (a request's on-demand load) a busy one is never evicted, and
        :class:`ModelLimit` says to wait."""
        if self.models_max <= 0:
            return
        while True:
            running = [e for e in self._entries.values() if e.running and e is not incoming]
            if len(running) < self.models_max:
                return
            loaded = [e for e in running if e.state == "loaded"]
            idle = [e for e in loaded if e.idle_now()]
            victims = idle if idle or idle_only else loaded
            if not victims:
                raise ModelLimit("model limit reached, try again later")
            victim = min(victims, key=lambda e: e.last_used)
            log.info("models_max limit reached, removing LRU name=%s", victim.name)
            await self._stop(victim, "evicted", trigger=f"router:evict (room for {incoming.name})")

    async def _stop(self, entry: Entry, why: str, timeout: float | None = None, *, trigger: str | None = None) -> None:
        """Drain and free a loaded model: requests holding it finish (up to stop-timeout), then its worker stops."""
        served = entry.served
        if served is None:
            return
        limit = float(entry.spec.extras.get("stop-timeout", DEFAULT_STOP_TIMEOUT) if timeout is None else timeout)
        self._set(entry, "draining")
        loop = asyncio.get_running_loop()

        async def drain() -> None:
            deadline = time.monotonic() + limit
            while entry.leases > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(served.worker.stop, max(0.0, deadline - time.monotonic()))

        entry.stopping = loop.create_task(drain())
        try:
            await asyncio.shield(entry.stopping)
        finally:
            entry.stopping = None
            entry.served = None
            entry.leases = 0
            self._set(entry, "unloaded")
            self._steps.append(PoolStep(trigger or why, entry.name, "unloaded"))
            self.events.unloaded(entry)
            log.info("model name=%s unloaded (%s)", entry.name, why)
            del served
            # The freed model's pages go back to the system (mlxd.engine.memory), off the loop and the lock.
            loop.run_in_executor(None, release_freed_memory)

    async def _watch_idle(self) -> None:
        """Unload a loaded model idle for its sleep-idle-seconds (-1 disables; per model, so a preset sets it):
        the owner executes the unload, which checks again under its lock."""
        while True:
            await asyncio.sleep(IDLE_CHECK_SECONDS)
            for entry in list(self._entries.values()):
                idle = int(entry.spec.config.sleep_idle_seconds)
                if idle > 0 and entry.idle_for(idle):
                    try:
                        await self._change(PoolChange("idle", entry.name, "router:idle"))
                    except MlxdError as exc:  # the watch goes on; the owner recorded what failed
                        log.error("idle unload of model name=%s failed: %s", entry.name, exc)
