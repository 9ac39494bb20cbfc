"""The one reconcile path (design principle 3).

Startup, a file edit, SIGHUP, an admin call and llama-server's management routes all do the same thing: build the
desired configuration, validate it, diff it against the running one, apply the plan, and commit a new generation.
If any step fails nothing changes: the running configuration keeps serving and the error is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Mapping

from mlxd.config import UNSET, ChangePlan, ConfigError, ResolvedConfig, apply_overrides, diff
from mlxd.daemon.discovery import resolve_serving
from mlxd.daemon.events import EventBus
from mlxd.daemon.logs import configure_logging, redact
from mlxd.daemon.notify import Notifier
from mlxd.errors import AdminError, MlxdError

if TYPE_CHECKING:
    from mlxd.api.state import ServedModel, ServingState

log = logging.getLogger("mlxd.daemon.reconcile")

# Options whose change needs the model reloaded (new weights, adapters or a new worker with other slots/context).
MODEL_OPTIONS = frozenset({
    "model", "hf-repo", "model-store-root", "offline", "hf-token", "ctx-size", "parallel", "batch-size",
    "ubatch-size", "cont-batching", "cache-prompt", "cache-ram", "context-shift", "keep", "n-predict", "lora",
    "lora-scaled", "lora-init-without-apply", "kv-unified",
})
TEMPLATE_OPTIONS = frozenset({"chat-template", "chat-template-file", "jinja"})
LOG_OPTIONS = frozenset({
    "log-disable", "log-file", "log-verbosity", "log-verbose", "log-colors", "log-prefix", "log-timestamps",
    # secrets feed the redaction filter
    "api-key", "api-key-file", "hf-token", "admin-token-file",
})


@dataclass(frozen=True)
class ChangeResult:
    """What a change did (or would do, for a dry run)."""

    applied: bool
    generation: int
    config_hash: str
    changed: tuple[str, ...] = ()
    pending_restart: tuple[str, ...] = ()
    dry_run: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class LastError:
    trigger: str
    message: str
    time: float = field(default_factory=time.time)


class Controller:
    """Owns the running configuration and every change to it; one change at a time."""

    def __init__(self, *, argv: list[str], env: Mapping[str, str], resolved: ResolvedConfig,
                 serving: "ServingState", notifier: Notifier,
                 load_model: Callable[[ResolvedConfig], "ServedModel | None"],
                 log_settings: Callable[[Any], Any]) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.resolved = resolved
        self.running_baseline = resolved  # what the listeners were opened with (restart options)
        self.serving = serving
        self.notifier = notifier
        self.load_model = load_model
        self.log_settings = log_settings
        self.overrides: dict[str, Any] = {}
        self.generation = 0
        self.last_error: LastError | None = None
        self.events = EventBus()
        # name -> (state, error) of models other than the one in service: loading, draining, unloaded, failed.
        self.model_states: dict[str, tuple[str, str | None]] = {}
        self.lock = asyncio.Lock()
        self.started_at = time.time()
        self._retiring: set[asyncio.Task[None]] = set()  # replaced models (or a router pool) still draining

    # -- what is running --------------------------------------------------------------------------------------
    @property
    def etag(self) -> str:
        """Names this generation of the configuration for If-Match (conflicting writes are refused)."""
        return hashlib.sha256(f"{self.generation}:{self.resolved.config_hash}".encode()).hexdigest()[:16]

    @property
    def pending_restart(self) -> tuple[str, ...]:
        """Restart options whose running value differs from the configured one."""
        return tuple(c.name for c in diff(self.running_baseline, self.resolved).restart)

    def commit_startup(self) -> None:
        """The first generation: the configuration the daemon started with is now running."""
        self.generation = 1
        self.events.publish("committed", generation=1, config_hash=self.resolved.config_hash, trigger="startup",
                            changed=[])

    # -- triggers ---------------------------------------------------------------------------------------------
    async def reload(self, trigger: str = "sighup", *, dry_run: bool = False) -> ChangeResult:
        """Re-read the files (TOML, presets, config.ini) with the startup argv and environment, plus overrides."""
        overrides = dict(self.overrides)

        def build() -> ResolvedConfig:
            fresh = resolve_serving(self.argv, self.env)
            return apply_overrides(fresh, overrides) if overrides else fresh

        return await self.change(build, trigger=trigger, dry_run=dry_run)

    async def patch(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                    if_match: str | None = None) -> ChangeResult:
        """Lay ``{option: value}`` over the running configuration as runtime overrides (source ``admin``)."""
        # UNSET drops an override, so it is not kept in the admin layer.
        overrides = {k: v for k, v in {**self.overrides, **values}.items() if v is not UNSET}
        base = self.resolved
        return await self.change(lambda: apply_overrides(base, values), trigger=trigger, dry_run=dry_run,
                                 if_match=if_match, new_overrides=overrides)

    async def replace_overrides(self, values: Mapping[str, Any], *, trigger: str = "admin", dry_run: bool = False,
                                if_match: str | None = None) -> ChangeResult:
        """Replace the whole admin layer with ``values`` (options not named fall back to the files)."""
        overrides = dict(values)

        def build() -> ResolvedConfig:
            fresh = resolve_serving(self.argv, self.env)
            return apply_overrides(fresh, overrides) if overrides else fresh

        return await self.change(build, trigger=trigger, dry_run=dry_run, if_match=if_match,
                                 new_overrides=overrides)

    # -- LoRA scales: live state of the loaded model ---------------------------------------------------------
    def lora_state(self) -> list[dict[str, Any]]:
        """The served model's adapters with their server-wide scales: ``[{"id", "path", "scale"}]``."""
        model = self.serving.model
        return model.worker.lora_adapters() if model is not None else []

    async def set_lora_scales(self, scales: dict[int, float], *, trigger: str) -> ChangeResult:
        """Replace the served model's server-wide LoRA scales; adapters not listed get 0 (b10621's rule).

        Scales are live state of the loaded model, not configuration: the config hash stays, a change bumps the
        generation and is a ``committed`` event with ``changed == ["lora-scales"]``, and a model reload starts
        again from ``--lora-scaled`` / ``--lora-init-without-apply`` (put scales there to keep them). An unknown
        id or a non-finite scale is refused and changes nothing. Requests already submitted keep their scales.
        """
        async with self.lock:
            model = self.serving.model
            if model is None:
                return self._refuse(trigger, "no model is loaded: LoRA scales belong to a loaded model", False)
            lora = model.worker.lora
            try:
                full = lora.check(scales)
            except MlxdError as exc:
                return self._refuse(trigger, str(exc), False)
            if tuple(full.values()) == lora.scales:
                log.info("%s: LoRA scales unchanged (generation %d)", trigger, self.generation)
                return ChangeResult(False, self.generation, self.resolved.config_hash, (), self.pending_restart)
            model.worker.set_lora_scales(full)
            self.generation += 1
            self.last_error = None
            self.events.publish("committed", generation=self.generation, config_hash=self.resolved.config_hash,
                                trigger=trigger, changed=["lora-scales"], lora=self.lora_state())
            log.info("%s: LoRA scales %s, generation %d", trigger,
                     ", ".join(f"{i}={s:g}" for i, s in full.items()), self.generation)
            return ChangeResult(True, self.generation, self.resolved.config_hash, ("lora-scales",),
                                self.pending_restart)

    # -- the path ---------------------------------------------------------------------------------------------
    async def change(self, build: Callable[[], ResolvedConfig], *, trigger: str, dry_run: bool = False,
                     if_match: str | None = None, new_overrides: dict[str, Any] | None = None) -> ChangeResult:
        """Build -> validate -> diff -> apply -> commit, or record the failure and change nothing."""
        async with self.lock:
            if if_match is not None and if_match.strip('"') != self.etag:
                raise AdminError("conflict", f"the configuration changed (etag {self.etag}); re-read and retry", 412)
            try:
                desired = await asyncio.to_thread(build)
            except ConfigError as exc:
                return self._refuse(trigger, str(exc), dry_run)
            plan = diff(self.resolved, desired)
            restart = tuple(c.name for c in diff(self.running_baseline, desired).restart)
            if dry_run:
                return ChangeResult(False, self.generation, desired.config_hash, plan.changed, restart, True)
            if plan.empty:
                if new_overrides is not None:
                    self.overrides = new_overrides
                    self.resolved = desired  # same values and hash; the provenance may have moved
                log.info("%s: no change (generation %d)", trigger, self.generation)
                return ChangeResult(False, self.generation, self.resolved.config_hash, (), restart)
            log.info("%s: applying %s", trigger, ", ".join(plan.changed) or "model changes")
            self.notifier.reloading(f"applying change from {trigger}")
            try:
                await self._apply(plan, desired)
            except MlxdError as exc:
                self.notifier.ready(f"change from {trigger} refused")
                return self._refuse(trigger, str(exc), False)
            self.resolved = desired
            if new_overrides is not None:
                self.overrides = new_overrides
            self.generation += 1
            self.last_error = None
            for name in restart:
                log.warning("%s changed; it takes effect after a restart", name)
            self.events.publish("committed", generation=self.generation, config_hash=desired.config_hash,
                                trigger=trigger, changed=list(plan.changed), pending_restart=list(restart))
            self.notifier.ready(f"generation {self.generation} ({trigger})")
            log.info("%s: committed generation %d (config %s)", trigger, self.generation, desired.config_hash[:12])
            return ChangeResult(True, self.generation, desired.config_hash, plan.changed, restart)

    def model_state(self, name: str, state: str, error: str | None = None) -> None:
        """Record a model's state (loading, loaded, draining, unloaded, failed) and publish it as an event."""
        name, error = redact(name), (redact(error) if error else None)
        self.model_states[name] = (state, error)
        self.events.publish("model", name=name, state=state, **({"error": error} if error else {}))

    def _refuse(self, trigger: str, message: str, dry_run: bool) -> ChangeResult:
        message = redact(message)  # it is shown by status, events and the admin API, not only logged
        if not dry_run:
            self.last_error = LastError(trigger, message)
            self.events.publish("refused", trigger=trigger, error=message, generation=self.generation)
            for line in message.splitlines():
                log.error("%s: change refused: %s", trigger, line)
        return ChangeResult(False, self.generation, self.resolved.config_hash, (), (), dry_run, message)

    async def _apply(self, plan: ChangePlan, desired: ResolvedConfig) -> None:
        """Prepare everything that can fail, then swap; a failure before the swap leaves the running state alone."""
        changed = set(plan.changed)
        current = self.serving.model
        replacement: "ServedModel | None" = current
        if changed & MODEL_OPTIONS or (current is None and not desired.is_router):
            label = _label(desired)
            if label:
                self.model_state(label, "loading")
            try:
                replacement = await asyncio.to_thread(self.load_model, desired)
            except MlxdError as exc:
                if label:
                    self.model_state(label, "failed", str(exc))
                raise
            if replacement is not None:
                self.model_states.pop(replacement.name, None)
                self.model_states.pop(label or replacement.name, None)
                self.events.publish("model", name=replacement.name, state="loaded")
        elif current is not None and changed:
            replacement = await asyncio.to_thread(_refresh, current, desired, bool(changed & TEMPLATE_OPTIONS))
        if changed & LOG_OPTIONS:
            try:
                configure_logging(self.log_settings(desired.config))
            except MlxdError:
                if replacement is not None and replacement is not current \
                        and (current is None or replacement.worker is not current.worker):
                    await asyncio.to_thread(replacement.worker.stop, 0.0)
                raise
        pool = self.serving.pool
        if pool is not None and desired.is_router:
            await pool.apply(desired)  # models added, removed or changed (rule 2.17)
        # The swap: new requests see the new model and configuration from here on.
        self.serving.config = desired.config
        self.serving.model = replacement
        if current is not None and (replacement is None or replacement.worker is not current.worker):
            self._in_background(self._retire(current, desired))
        if pool is not None and not desired.is_router:  # a model argument now: the router's models drain and go
            self.serving.pool = None
            self._in_background(pool.close(float(desired.config.shutdown_timeout)))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """The daemon is stopping: let a change in progress finish, then wait for replaced models to be freed.

        A worker left running when the event loop ends would be torn down with the interpreter, which aborts.
        """
        async with self.lock:
            while self._retiring:
                await asyncio.gather(*self._retiring, return_exceptions=True)

    async def _retire(self, old: "ServedModel", desired: ResolvedConfig) -> None:
        """Let the replaced model finish its in-flight generations, then free it."""
        timeout = float(desired.config.shutdown_timeout)
        self.model_state(old.name, "draining")
        log.info("model %s draining (%d in flight)", old.name, old.worker.n_in_flight)
        await asyncio.to_thread(old.worker.stop, timeout)
        served = self.serving.model
        if served is not None and served.name == old.name:
            self.model_states.pop(old.name, None)  # the same name is served again by the new worker
            self.events.publish("model", name=old.name, state="unloaded")
        else:
            self.model_state(old.name, "unloaded")
        log.info("model %s unloaded", old.name)


def _label(resolved: ResolvedConfig) -> str | None:
    """The name a configuration's model will be served under (first alias in sorted order, else -m, else --hf-repo)."""
    cfg = resolved.config
    aliases = sorted(set(cfg.alias or []))  # b10621 keeps them in a std::set: the smallest names the model
    return aliases[0] if aliases else (cfg.model or cfg.hf_repo)


def _refresh(current: "ServedModel", desired: ResolvedConfig, template_changed: bool) -> "ServedModel":
    """The same worker with new sampling defaults (and template): no reload, no drain."""
    from mlxd.engine.chat import load_chat_template
    from mlxd.engine.sampling import defaults_from

    cfg = desired.config
    explicit = {name for name in desired.provenance if desired.explicit(name)}
    values = {name: desired.value(name) for name in desired.provenance}
    sampling = defaults_from(values, current.loaded.generation_config, explicit)
    template = current.chat_template
    if template_changed:
        tokenizer = current.loaded.tokenizer
        template = load_chat_template(current.loaded.path, chat_template=cfg.chat_template,
                                      chat_template_file=cfg.chat_template_file,
                                      bos_token=getattr(tokenizer, "bos_token", None),
                                      eos_token=getattr(tokenizer, "eos_token", None))
    aliases = sorted(set(cfg.alias or []))  # b10621 keeps them in a std::set: the smallest names the model
    name = aliases[0] if aliases else current.name
    return dataclasses.replace(current, sampling_defaults=sampling, chat_template=template, aliases=aliases,
                               name=name)
