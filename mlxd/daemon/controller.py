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

from mlxd.config import UNSET, ChangePlan, ConfigError, ResolvedConfig, apply_overrides, diff
from mlxd.config.change import ChangeResult, LastError
from mlxd.daemon.admin_layer import canonical, etag, loses_the_model, reread
from mlxd.daemon.discovery import resolve_serving
from mlxd.daemon.events import EventBus
from mlxd.daemon.logs import configure_logging, redact
from mlxd.daemon.model_lifecycle import ModelLifecycle
from mlxd.daemon.notify import Notifier
from mlxd.daemon.served import live_scales, lora_overrides, refresh
from mlxd.errors import AdminError, MlxdError
from mlxd.schemas.admin import ModelStateName

if TYPE_CHECKING:
    from mlxd.api import ServedModel, ServingState
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
        return etag(self.generation, self.resolved.config_hash)

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

    # -- triggers that rebuild the configuration --------------------------------------------------------------
    async def reload(self, trigger: str = "sighup", *, dry_run: bool = False) -> ChangeResult:
        """Re-read the files (TOML, presets, config.ini) with the startup argv and environment; the admin layer
        stays on top, less the options the files now set to something else (docs/admin.md)."""
        async with self.lock:
            try:
                fresh, desired, kept = await asyncio.to_thread(reread, self.argv, self.env, self.overrides, self.base)
            except ConfigError as exc:
                return self._refuse(trigger, str(exc), dry_run)
            refusal = loses_the_model(self.resolved, desired)
            if refusal is not None:
                return self._refuse(trigger, refusal, dry_run)
            return await self._change(desired, trigger=trigger, dry_run=dry_run, overrides=kept, base=fresh)

    async def patch(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                    if_match: str | None = None) -> ChangeResult:
        """Lay ``{option: value}`` over the running configuration as the admin layer (source ``admin``)."""
        async with self.lock:
            self._check_etag(if_match)
            return await self._patch(values, trigger=trigger, dry_run=dry_run)

    async def replace_overrides(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                                if_match: str | None = None) -> ChangeResult:
        """Replace the whole admin layer with ``values`` (options not named fall back to the files)."""
        async with self.lock:
            self._check_etag(if_match)
            try:
                fresh = await asyncio.to_thread(resolve_serving, self.argv, self.env)
                desired = apply_overrides(fresh, values) if values else fresh
                overrides = canonical(values)
            except ConfigError as exc:
                return self._refuse(trigger, str(exc), dry_run)
            return await self._change(desired, trigger=trigger, dry_run=dry_run, overrides=overrides, base=fresh)

    # -- LoRA scales: the lora-scaled option of the admin layer ----------------------------------------------
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
        submitted keep their scales. ``if_match`` is checked under the lock, as for every other change."""
        async with self.lock:
            self._check_etag(if_match)
            model = self.serving.model
            if model is None:
                return self._refuse(trigger, "no model is loaded: LoRA scales belong to a loaded model", False)
            try:
                full = model.worker.lora.check(scales)
            except MlxdError as exc:
                return self._refuse(trigger, str(exc), False)
            return await self._patch(lora_overrides(self.resolved.config, full), trigger=trigger, dry_run=False)

    # -- the router's pool: explicit loads and unloads --------------------------------------------------------
    async def load_pool_model(self, name: str, *, trigger: str, wait: bool = False) -> ChangeResult:
        """Load a router model (``POST /models/load``, ``mlxd admin load``); a name the pool does not know, or a
        model already running, raises RequestError (the client's mistake, not a refused change)."""
        return await self._pool_action("load", name, trigger=trigger, wait=wait)

    async def unload_pool_model(self, name: str, *, trigger: str) -> ChangeResult:
        """Unload a router model once its in-flight requests finish: the only way the pool is emptied."""
        return await self._pool_action("unload", name, trigger=trigger, wait=True)

    async def _pool_action(self, action: str, name: str, *, trigger: str, wait: bool) -> ChangeResult:
        async with self.lock:
            pool = self.pool
            if pool is None:
                raise AdminError("not_router", "the daemon serves one model; load and unload change its model", 409)
            error: MlxdError | None = None
            try:
                if action == "load":
                    await pool.load(name, wait=wait, trigger=trigger)
                else:
                    await pool.unload(name, trigger=trigger)
            except MlxdError as exc:
                error = exc
            steps = pool.take_steps()
            if error is not None and not steps and getattr(error, "status", 500) < 500:
                raise error  # the client's mistake (unknown name, not running): nothing changed
            result = self._commit_steps(steps)
            if error is not None and (result is None or result.error is None):
                return self._refuse(trigger, f"model {name!r}: {error}", False)
            # A load not waited for (POST /models/load) commits when its model is installed.
            return result or ChangeResult(False, self.generation, self.resolved.config_hash, (), ())

    # -- the router's own changes: on-demand loads, finished loads, LRU evictions, idle unloads ----------------
    async def pool_change(self, pool: "ModelPool", change: "PoolChange") -> None:
        """Execute a change the router's pool asks for, under the lock, and commit what it did: one generation
        per model loaded or unloaded (an eviction, an idle unload), a refusal for a load that failed (the request
        gets its error, the entry shows failed, the rest of the pool is as it was).

        The lock is held only while the pool decides and installs; a model's weights are read on a thread with
        the lock free (mlxd.daemon.router.ModelPool says how waits avoid it). A pool no longer in service (the
        router became a single-model server) still executes, so its models are freed, but commits nothing."""
        async with self.lock:
            try:
                await pool.execute(change)
            finally:
                steps = pool.take_steps()
                if pool is self.pool:
                    self._commit_steps(steps)

    def _commit_steps(self, steps: "list[PoolStep]") -> ChangeResult | None:
        """Commit each model the pool loaded or unloaded as a generation; refuse each load that failed."""
        result = None
        for step in steps:
            if step.error is not None:
                result = self._refuse(step.trigger, f"model {step.name!r}: {step.error}", False)
            else:
                result = self._commit(step.trigger, (f"models/{step.name}",), self.resolved.config_hash)
        return result

    # -- idle sleep and wake (--sleep-idle-seconds) -----------------------------------------------------------
    async def sleep(self, still_idle: Callable[["ServedModel"], bool]) -> str | None:
        """Take the served model out of service and free it, when ``still_idle(model)`` agrees under the lock (it
        also caches what sleeping routes answer); the model's name, or None when it did not sleep."""
        async with self.lock:
            served = self.serving.model
            if served is None or self.serving.sleeping or not still_idle(served):
                return None
            name = served.name
            self.serving.sleeping, self.serving.model = True, None
            # Nothing is in flight; with a disk tier the prompt cache is written there first, so waking is warm.
            await asyncio.to_thread(served.worker.stop, 0.0, float(self.resolved.config.shutdown_timeout))
            del served
            gc.collect()
            self.model_state(name, "unloaded")
            self._commit("sleep", ("sleeping",), self.resolved.config_hash)
            return name

    async def wake(self, name: str) -> None:
        """Load the model again (once, however many requests wait for it); a failure is recorded and raised."""
        async with self.lock:
            if not self.serving.sleeping:
                return
            if self.serving.model is None:
                try:
                    served = await self._load(self.resolved, why=" again (woken by a request)")
                except MlxdError as exc:
                    self._refuse("wake", str(exc), False)
                    raise
                self.serving.model = served
            self.serving.sleeping = False
            self.model_states.pop(name, None)
            self.events.publish("model", name=name, state="loaded")
            self._commit("wake", ("sleeping",), self.resolved.config_hash)

    # -- the path ---------------------------------------------------------------------------------------------
    def _check_etag(self, if_match: str | None) -> None:
        if if_match is not None and if_match.strip('"') != self.etag:
            raise AdminError("conflict", f"the configuration changed (etag {self.etag}); re-read and retry", 412)

    async def _patch(self, values: Mapping[str, Any], *, trigger: str, dry_run: bool) -> ChangeResult:
        try:
            desired = apply_overrides(self.resolved, values)
            # UNSET drops an override, so it is not kept in the admin layer.
            overrides = {k: v for k, v in {**self.overrides, **canonical(values)}.items() if v is not UNSET}
        except ConfigError as exc:
            return self._refuse(trigger, str(exc), dry_run)
        return await self._change(desired, trigger=trigger, dry_run=dry_run, overrides=overrides)

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
