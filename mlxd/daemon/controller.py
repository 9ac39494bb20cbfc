"""The one writer of the serving state (design principle 3).

Startup, a file edit, SIGHUP, an admin call, llama-server's management routes (``POST /lora-adapters``,
``POST /models/load``), the router pool's own changes (on-demand loads, LRU evictions, idle unloads: see
``pool_change``), idle sleep and wake all do the same thing here, one at a time under one lock: build the
desired state, validate it, diff it against the running one, apply the plan, and commit a new generation that is
published on ``/events``. If any step fails nothing changes: the running configuration keeps serving and the error
is recorded (``last_error``, the log, a ``refused`` event). No other module assigns the serving state
(tests/unit/test_architecture.py holds every module to that).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from mlxd.config import ChangePlan, ResolvedConfig, diff
from mlxd.config.change import ChangeResult, LastError
from mlxd.daemon import admin_layer
from mlxd.daemon.actions import Action, LoraScales, Patch, PoolAction, PoolRequest, Reread, Replace, Sleep, Wake
from mlxd.daemon.events import EventBus
from mlxd.daemon.logs import configure_logging, redact
from mlxd.daemon.model_lifecycle import ModelLifecycle
from mlxd.daemon.notify import Notifier
from mlxd.daemon.served import live_scales, refresh
from mlxd.errors import AdminError, MlxdError
from mlxd.schemas.admin import ModelStateName

if TYPE_CHECKING:
    from mlxd.api import ServingState
    from mlxd.engine import ServedModel
    from mlxd.daemon.pool_change import PoolChange, PoolStep
    from mlxd.daemon.router import ModelPool

log = logging.getLogger("mlxd.daemon.reconcile")

__all__ = ["ChangeResult", "Controller", "LastError"]


class Controller(ModelLifecycle):
    """Owns the serving state (model, pool, config, sleeping) and its generation; one change at a time."""

    def __init__(self, *, argv: list[str], env: Mapping[str, str], resolved: ResolvedConfig,
                 serving: "ServingState", notifier: Notifier,
                 load_model: Callable[[ResolvedConfig], "ServedModel | None"],
                 log_settings: Callable[[Any], Any]) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.resolved = resolved  # the configuration in force (generation 0: the one startup will apply)
        self.base = resolved  # the same, less the admin layer: what the files, environment and argv say
        self.running_baseline = resolved  # what the listeners were opened with (restart options)
        self.serving = serving
        self.notifier = notifier
        self.load_model = load_model
        self.log_settings = log_settings
        self.overrides: dict[str, Any] = {}  # the admin layer: canonical option name -> value
        self.generation = 0
        self.last_error: LastError | None = None
        self.last_result: str = "none"  # committed | unchanged | refused: the last change's outcome (/metrics)
        self.events = EventBus()
        # name -> (state, error) of models other than the one in service: loading, draining, unloaded, failed.
        self.model_states: dict[str, tuple[ModelStateName, str | None]] = {}
        self.lock = asyncio.Lock()
        self.started_at = time.time()
        self._retiring: set[asyncio.Task[None]] = set()  # replaced models (or a router pool) still draining
        serving.controller = self

    # -- what is running --------------------------------------------------------------------------------------
    @property
    def etag(self) -> str:
        """Names this generation of the configuration for If-Match (conflicting writes are refused)."""
        return admin_layer.etag(self.generation, self.resolved.config_hash)

    @property
    def pool(self) -> "ModelPool | None":
        """The router's pool in service (the serving state types it by what the routes use)."""
        return cast("ModelPool | None", self.serving.pool)

    @property
    def pending_restart(self) -> tuple[str, ...]:
        """Restart options whose running value differs from the configured one."""
        return tuple(c.name for c in diff(self.running_baseline, self.resolved).restart)

    # -- startup: the change from nothing to the first configuration -----------------------------------------
    async def start(self) -> str:
        """Load the model (or start the router's pool) and commit generation 1; what is served, for the log.

        Raises MlxdError when the configuration cannot be served (the daemon then exits)."""
        from mlxd.daemon.loading import load_router_model
        from mlxd.daemon.router import ModelPool
        from mlxd.api import sleeping_views
        from mlxd.daemon.sleep import Sleeper

        async with self.lock:
            desired = self.resolved
            what = "no model"
            if desired.is_router:
                pool = ModelPool(desired, load_router_model, owner=self)
                names = ", ".join(sorted(desired.models)) or "none"
                log.info("router: %d model(s) available: %s", len(desired.models), names)
                self.serving.pool = pool
                try:
                    await pool.start()
                except MlxdError:
                    await pool.close(0.0)
                    self.serving.pool = None
                    raise
                pool.take_steps()  # the load-on-startup models are part of the startup generation
                what = "the router"
            else:
                self.notifier.status("loading model")
                served = await self._load(desired)
                if served is not None:
                    what = served.name
                self.serving.model = served
                # A single-model server sleeps when idle (--sleep-idle-seconds); the router's pool does that itself.
                self.serving.sleeper = Sleeper(self.serving, self, sleeping_views)
            self.serving.config = desired.config
            self._commit("startup", (), desired.config_hash)
            return what

    # -- the one path -----------------------------------------------------------------------------------------
    async def change(self, action: Action, *, trigger: str, dry_run: bool = False,
                     if_match: str | None = None) -> ChangeResult:
        """Take the lock, check ``If-Match``, then plan, apply and commit ``action``, or record why not and change
        nothing. A configuration action is diffed against the running configuration (``dry_run`` stops there); a
        runtime one commits what the pool, sleep or wake did. Raises AdminError for a stale ``If-Match`` or a pool
        action that names nothing to change, and the load error of a failed wake (its requests get it)."""
        async with self.lock:
            self._check_etag(if_match)
            if isinstance(action, (Reread, Patch, Replace, LoraScales)):
                try:
                    wanted = action.as_patch(self.resolved.config, self.serving.model) \
                        if isinstance(action, LoraScales) else action
                    desired, overrides, base = await asyncio.to_thread(
                        admin_layer.desired, wanted, running=self.resolved, overrides=self.overrides, base=self.base,
                        argv=self.argv, env=self.env)
                except MlxdError as exc:
                    return self._refuse(trigger, str(exc), dry_run)
                return await self._change(desired, trigger=trigger, dry_run=dry_run, overrides=overrides, base=base)
            if isinstance(action, PoolAction):
                return await self._pool_action(action, trigger)
            if isinstance(action, PoolRequest):
                return await self._pool_request(action)
            if isinstance(action, Sleep):
                return await self._sleep(action)
            return await self._wake(action)

    # -- the triggers, each one typed action ------------------------------------------------------------------
    async def reload(self, trigger: str = "sighup", *, dry_run: bool = False) -> ChangeResult:
        """Re-read the files (TOML, presets, config.ini): a file edit, SIGHUP, ``POST /v1/reload``."""
        return await self.change(Reread(), trigger=trigger, dry_run=dry_run)

    async def patch(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                    if_match: str | None = None) -> ChangeResult:
        """Lay ``{option: value}`` over the running configuration as the admin layer (source ``admin``)."""
        return await self.change(Patch(values), trigger=trigger, dry_run=dry_run, if_match=if_match)

    async def replace_overrides(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                                if_match: str | None = None) -> ChangeResult:
        """Replace the whole admin layer with ``values`` (options not named fall back to the files)."""
        return await self.change(Replace(values), trigger=trigger, dry_run=dry_run, if_match=if_match)

    def lora_state(self) -> list[dict[str, Any]]:
        """The served model's adapters with their server-wide scales: ``[{"id", "path", "scale"}]``."""
        model = self.serving.model
        return model.worker.lora_adapters() if model is not None else []

    async def set_lora_scales(self, scales: dict[int, float], *, trigger: str,
                              if_match: str | None = None) -> ChangeResult:
        """Replace the served model's server-wide LoRA scales; adapters not listed get 0 (b10621's rule).

        The scales become the admin layer's ``lora-scaled`` (so they have provenance, are in the config hash,
        survive reloads and are written by ``persist``) and apply live to the loaded adapters, without reloading
        the weights. An unknown id or a non-finite scale is refused and changes nothing. Requests already
        submitted keep their scales."""
        return await self.change(LoraScales(scales), trigger=trigger, if_match=if_match)

    async def load_pool_model(self, name: str, *, trigger: str, wait: bool = False) -> ChangeResult:
        """Load a router model (``POST /models/load``, ``mlxd admin load``); a name the pool does not know, or a
        model already running, raises RequestError (the client's mistake, not a refused change)."""
        return await self.change(PoolAction("load", name, wait), trigger=trigger)

    async def unload_pool_model(self, name: str, *, trigger: str) -> ChangeResult:
        """Unload a router model once its in-flight requests finish: the only way the pool is emptied."""
        return await self.change(PoolAction("unload", name), trigger=trigger)

    async def pool_change(self, pool: "ModelPool", change: "PoolChange") -> None:
        """A change the router's pool asks for (an on-demand load, a finished load, an LRU eviction, an idle
        unload): one generation per model loaded or unloaded, a refusal for a load that failed (the request gets
        its error, the entry shows failed, the rest of the pool is as it was); weights are read with the lock free
        (mlxd.daemon.router.ModelPool)."""
        await self.change(PoolRequest(pool, change), trigger=change.trigger)

    async def sleep(self, still_idle: Callable[["ServedModel"], bool]) -> str | None:
        """Take the served model out of service and free it, when ``still_idle(model)`` agrees under the lock (it
        also caches what sleeping routes answer); the model's name, or None when it did not sleep."""
        slept: list[str] = []

        def idle(served: "ServedModel") -> bool:
            if still_idle(served):
                slept.append(served.name)
                return True
            return False

        result = await self.change(Sleep(idle), trigger="sleep")
        return slept[0] if result.applied and slept else None

    async def wake(self, name: str) -> None:
        """Load the model again (once, however many requests wait for it); a failure is recorded and raised."""
        await self.change(Wake(name), trigger="wake")

    # -- runtime changes: the router's pool, sleep and wake ---------------------------------------------------
    async def _pool_action(self, action: PoolAction, trigger: str) -> ChangeResult:
        pool = self.pool
        if pool is None:
            raise AdminError("not_router", "the daemon serves one model; load and unload change its model", 409)
        error: MlxdError | None = None
        try:
            if action.kind == "load":
                await pool.load(action.name, wait=action.wait, trigger=trigger)
            else:
                await pool.unload(action.name, trigger=trigger)
        except MlxdError as exc:
            error = exc
        steps = pool.take_steps()
        if error is not None and not steps and getattr(error, "status", 500) < 500:
            raise error  # the client's mistake (unknown name, not running): nothing changed
        result = self._commit_steps(steps)
        if error is not None and (result is None or result.error is None):
            return self._refuse(trigger, f"model {action.name!r}: {error}", False)
        # A load not waited for (POST /models/load) commits when its model is installed.
        return result or self._unchanged()

    async def _pool_request(self, request: PoolRequest) -> ChangeResult:
        # A pool no longer in service (the router became a single-model server) still executes, so its models are
        # freed, but commits nothing.
        pool = request.pool
        try:
            await pool.execute(request.change)
        finally:
            steps = pool.take_steps()
            result = self._commit_steps(steps) if pool is self.pool else None
        return result or self._unchanged()

    def _commit_steps(self, steps: "list[PoolStep]") -> ChangeResult | None:
        """Commit each model the pool loaded or unloaded as a generation; refuse each load that failed."""
        result = None
        for step in steps:
            if step.error is not None:
                result = self._refuse(step.trigger, f"model {step.name!r}: {step.error}", False)
            else:
                result = self._commit(step.trigger, (f"models/{step.name}",), self.resolved.config_hash)
        return result

    async def _sleep(self, action: Sleep) -> ChangeResult:
        served = self.serving.model
        if served is None or self.serving.sleeping or not action.still_idle(served):
            return self._unchanged()
        name = served.name
        self.serving.sleeping, self.serving.model = True, None
        # Nothing is in flight; with a disk tier the prompt cache is written there first, so waking is warm.
        await asyncio.to_thread(served.worker.stop, 0.0, float(self.resolved.config.shutdown_timeout))
        del served
        gc.collect()
        self.model_state(name, "unloaded")
        return self._commit("sleep", ("sleeping",), self.resolved.config_hash)

    async def _wake(self, action: Wake) -> ChangeResult:
        if not self.serving.sleeping:
            return self._unchanged()
        if self.serving.model is None:
            try:
                served = await self._load(self.resolved, why=" again (woken by a request)")
            except MlxdError as exc:
                self._refuse("wake", str(exc), False)
                raise
            self.serving.model = served
        self.serving.sleeping = False
        self.model_states.pop(action.name, None)
        self.events.publish("model", name=action.name, state="loaded")
        return self._commit("wake", ("sleeping",), self.resolved.config_hash)

    def _unchanged(self) -> ChangeResult:
        return ChangeResult(False, self.generation, self.resolved.config_hash, (), ())

    # -- the path ---------------------------------------------------------------------------------------------
    def _check_etag(self, if_match: str | None) -> None:
        if if_match is not None and if_match.strip('"') != self.etag:
            raise AdminError("conflict", f"the configuration changed (etag {self.etag}); re-read and retry", 412)

    async def _change(self, desired: ResolvedConfig, *, trigger: str, dry_run: bool, overrides: dict[str, Any],
                      base: ResolvedConfig | None = None) -> ChangeResult:
        """Diff -> apply -> commit, or record the failure and change nothing (called under the lock)."""
        plan = diff(self.resolved, desired)
        restart = tuple(c.name for c in diff(self.running_baseline, desired).restart)
        if dry_run:
            return ChangeResult(False, self.generation, desired.config_hash, plan.changed, restart, True)
        if plan.empty:
            self.overrides, self.resolved = overrides, desired  # same values and hash; the provenance may move
            self.base = base or self.base
            self.last_error, self.last_result = None, "unchanged"  # the trigger succeeded: nothing to fix
            log.info("%s: no change (generation %d)", trigger, self.generation)
            return ChangeResult(False, self.generation, self.resolved.config_hash, (), restart)
        log.info("%s: applying %s (%s)", trigger, ", ".join(plan.changed) or "model changes",
                 ", ".join(sorted(plan.effects)))
        self.notifier.reloading(f"applying change from {trigger}")
        try:
            await self._apply(plan, desired)
        except MlxdError as exc:
            self.notifier.ready(f"change from {trigger} refused")
            return self._refuse(trigger, str(exc), False)
        self.resolved, self.overrides, self.base = desired, overrides, base or self.base
        for name in restart:
            log.warning("%s changed; it takes effect after a restart", name)
        result = self._commit(trigger, plan.changed, desired.config_hash, restart)
        self.notifier.ready(f"generation {self.generation} ({trigger})")
        return result

    def _commit(self, trigger: str, changed: tuple[str, ...], config_hash: str,
                restart: tuple[str, ...] = ()) -> ChangeResult:
        self.generation += 1
        self.last_error, self.last_result = None, "committed"
        self.events.publish("committed", generation=self.generation, config_hash=config_hash, trigger=trigger,
                            changed=list(changed), pending_restart=list(restart))
        log.info("%s: committed generation %d (config %s)", trigger, self.generation, config_hash[:12])
        return ChangeResult(True, self.generation, config_hash, changed, restart)

    def _refuse(self, trigger: str, message: str, dry_run: bool) -> ChangeResult:
        message = redact(message)  # it is shown by status, events and the admin API, not only logged
        if not dry_run:
            self.last_error, self.last_result = LastError(trigger, message), "refused"
            self.events.publish("refused", trigger=trigger, error=message, generation=self.generation)
            for line in message.splitlines():
                log.error("%s: change refused: %s", trigger, line)
        return ChangeResult(False, self.generation, self.resolved.config_hash, (), (), dry_run, message)

    async def _apply(self, plan: ChangePlan, desired: ResolvedConfig) -> None:
        """Execute the plan's effects: prepare everything that can fail, then swap; a failure before the swap
        leaves the running state alone."""
        current = self.serving.model
        replacement: "ServedModel | None" = current
        reload, scales = plan.has("reload"), None
        if plan.has("adapters") and not reload:
            scales = live_scales(self.resolved.config, desired.config)
            reload = scales is None  # another set of adapters: new weights
        if desired.is_router:
            replacement = None  # no model argument: nothing is served but the router's models (an unload)
        elif reload or (current is None and not self.serving.sleeping):
            replacement = await self._load(desired)
        elif current is not None:
            replacement = await asyncio.to_thread(refresh, current, desired, plan.has("template"))
        if plan.has("logging"):
            try:
                configure_logging(self.log_settings(desired.config))
            except MlxdError:
                if replacement is not None and replacement is not current \
                        and (current is None or replacement.worker is not current.worker):
                    await asyncio.to_thread(replacement.worker.stop, 0.0)
                raise
        pool = self.pool
        if pool is not None and desired.is_router:
            await pool.apply(desired)  # models added, removed or changed (rule 2.17)
            pool.take_steps()  # part of this change's generation
        # The swap: new requests see the new model and configuration from here on.
        self.serving.config = desired.config
        self.serving.model = replacement
        if scales is not None and replacement is not None:
            replacement.worker.set_lora_scales(scales)  # live: requests already submitted keep their snapshot
        if desired.is_router or (replacement is not None and replacement is not current):
            self.serving.sleeping = False  # a change that loaded the model woke it; an unload ends the sleep
        if current is not None and (replacement is None or replacement.worker is not current.worker):
            self._in_background(self._retire(current, desired))
        if pool is not None and not desired.is_router:  # a model argument now: the router's models drain and go
            self.serving.pool = None
            self._in_background(pool.close(float(desired.config.shutdown_timeout)))

    async def close(self) -> None:
        """The daemon is stopping: let a change in progress finish, wait for replaced models to be freed, and stop
        the router's models.

        A worker left running when the event loop ends would be torn down with the interpreter, which aborts.
        """
        async with self.lock:
            while self._retiring:
                await asyncio.gather(*self._retiring, return_exceptions=True)
            pool = self.pool
            if pool is not None:
                # Loads in progress are waited for (their threads only: the lock is held here) and every model
                # is stopped; nothing is committed any more.
                await pool.close(0.0)
