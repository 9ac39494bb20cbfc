"""What the admin listener reads from the daemon, as a protocol (the daemon imports admin, never the reverse)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping, Protocol, Sequence, cast

from mlxd.errors import AdminError
from mlxd.schemas.admin import (CacheDiskView, DaemonStateName, LastErrorView, ModelStateName, ModelView, PeerView,
                                StatusResponse)

if TYPE_CHECKING:
    from mlxd.config import Config, ResolvedConfig
    from mlxd.config.change import ChangeResult, LastError


class EventSource(Protocol):
    def subscribe(self) -> AsyncIterator[dict[str, Any]]: ...


class AdminController(Protocol):
    """The one writer of the serving state as the admin routes reach it (mlxd.daemon.controller.Controller)."""

    resolved: "ResolvedConfig"
    overrides: dict[str, Any]
    generation: int
    last_error: "LastError | None"
    last_result: str
    model_states: dict[str, tuple[ModelStateName, str | None]]
    lock: asyncio.Lock

    @property
    def events(self) -> EventSource: ...  # read-only, so that the controller's EventBus satisfies it

    @property
    def etag(self) -> str: ...

    @property
    def pending_restart(self) -> tuple[str, ...]: ...

    async def reload(self, trigger: str = ..., *, dry_run: bool = ...) -> "ChangeResult": ...

    async def patch(self, values: Mapping[str, Any], *, trigger: str = ..., dry_run: bool = ...,
                    if_match: str | None = ...) -> "ChangeResult": ...

    async def replace_overrides(self, values: Mapping[str, Any], *, trigger: str = ..., dry_run: bool = ...,
                                if_match: str | None = ...) -> "ChangeResult": ...

    def lora_state(self) -> list[dict[str, Any]]: ...

    async def set_lora_scales(self, scales: dict[int, float], *, trigger: str,
                              if_match: str | None = ...) -> "ChangeResult": ...

    async def load_pool_model(self, name: str, *, trigger: str, wait: bool = ...) -> "ChangeResult": ...

    async def unload_pool_model(self, name: str, *, trigger: str) -> "ChangeResult": ...


# What admin reads of the serving state (mlxd.api.state.ServingState and the objects it holds), described here
# because the admin room does not import the api. Read-only properties: admin never writes the serving state
# (only the controller does), and a read-only member accepts the api's narrower types.
class ServedView(Protocol):
    """A loaded model (mlxd.api.state.ServedModel): its name and aliases."""

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> list[str]: ...


class PoolEntryView(Protocol):
    """One router model (mlxd.daemon.router_entry.Entry): its name, state and error."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def error(self) -> str | None: ...


class PoolView(Protocol):
    """The router's pool (mlxd.daemon.router.ModelPool), read only: its changes go through the controller."""

    def entries(self) -> Sequence[PoolEntryView]: ...


class ServingView(Protocol):
    """The serving state (mlxd.api.state.ServingState) as the admin routes read it."""

    @property
    def model(self) -> ServedView | None: ...

    @property
    def pool(self) -> PoolView | None: ...

    @property
    def started_at(self) -> float: ...


class AdminHost(Protocol):
    """The daemon as the admin routes see it (mlxd.daemon.server.Daemon)."""

    state: Any  # an enum whose .value is starting | serving | reloading | draining | stopped
    resolved: "ResolvedConfig"  # the startup configuration
    shutdown: asyncio.Event

    @property
    def controller(self) -> AdminController | None: ...  # None until startup begins

    @property
    def serving(self) -> ServingView | None: ...  # None until the daemon has built it

    def cache_disk_summary(self) -> dict[str, Any] | None: ...  # the prompt cache's disk tier (None: never opened)

    # The two below are None until the daemon has built its serving state.
    def slots_summary(self) -> dict[str, list[dict[str, Any]]] | None: ...  # each loaded model's /slots entries

    def load_summary(self) -> dict[str, int] | None: ...  # /metrics's load counters (mlxd.api.live.load_summary)


def serving_state(host: AdminHost) -> ServingView:
    """The serving state, for a route that needs it; 503 while the daemon is still building it."""
    if host.serving is None:
        raise AdminError("unavailable", "the daemon is starting; retry when it is serving", 503)
    return host.serving


def daemon_state(host: AdminHost) -> DaemonStateName:
    """The daemon's state; ``reloading`` while a change holds the controller's lock."""
    state = cast(DaemonStateName, str(getattr(host.state, "value", host.state)))
    controller = host.controller
    if state == "serving" and controller is not None and controller.lock.locked():
        return "reloading"
    return state


def model_label(cfg: "Config") -> str | None:
    """The name a configuration's model is served under: its first alias in sorted order, else -m, else --hf-repo."""
    aliases = sorted(set(cfg.alias or []))  # b10621 keeps them in a std::set: the smallest names the model
    return aliases[0] if aliases else (cfg.model or cfg.hf_repo)


def models(host: AdminHost) -> list[ModelView]:
    """Each model the daemon knows of and its state: the one served, those loading, draining or failed."""
    controller = host.controller
    pool = host.serving.pool if host.serving is not None else None
    if pool is not None:  # router mode: every model the router knows of, loaded or not
        return [ModelView(name=e.name, state=cast(ModelStateName, e.state), error=e.error) for e in pool.entries()]
    served = host.serving.model if host.serving is not None else None
    if controller is None:  # still starting: the default model is loading
        label = model_label(host.resolved.config)
        if served is not None:
            return [ModelView(name=served.name, state="loaded")]
        return [ModelView(name=label, state="loading")] if label else []
    seen: dict[str, ModelView] = {}
    for name, (state, error) in controller.model_states.items():
        seen[name] = ModelView(name=name, state=state, error=error)
    if served is not None:
        seen[served.name] = ModelView(name=served.name, state="loaded")
    return list(seen.values())


def cache_disk(host: AdminHost) -> CacheDiskView | None:
    """The disk tier's counters, when a worker of this process has opened one."""
    totals = host.cache_disk_summary()
    return CacheDiskView(**totals) if totals is not None else None


def peers(host: AdminHost) -> list[PeerView] | None:
    """The members of the served model's distributed group (``--rpc``), None without one."""
    served = host.serving.model if host.serving is not None else None
    group = getattr(getattr(served, "worker", None), "group", None)
    if served is None or group is None:
        return None
    return [PeerView(model=served.name, **{k: v for k, v in member.items() if k != "error"})
            for member in group.status()]


def group_error(host: AdminHost) -> LastErrorView | None:
    """The served model's group's last loss (naming the peer), while it is not re-formed."""
    served = host.serving.model if host.serving is not None else None
    group = getattr(getattr(served, "worker", None), "group", None)
    message = getattr(group, "last_error", None)
    return LastErrorView(trigger="distributed", message=message, time=time.time()) if message else None


def status(host: AdminHost) -> StatusResponse:
    """``GET /v1/status``."""
    controller = host.controller
    started = host.serving.started_at if host.serving is not None else time.time()
    if controller is None:
        return StatusResponse(state=daemon_state(host), generation=0, config_hash=host.resolved.config_hash,
                              uptime=time.time() - started, last_error=group_error(host), pending_restart=[],
                              models=models(host), cache_disk=cache_disk(host), peers=peers(host))
    last = controller.last_error
    return StatusResponse(
        state=daemon_state(host), generation=controller.generation, config_hash=controller.resolved.config_hash,
        uptime=time.time() - started, pending_restart=list(controller.pending_restart), models=models(host),
        last_error=LastErrorView(trigger=last.trigger, message=last.message, time=last.time) if last
        else group_error(host),
        etag=controller.etag, cache_disk=cache_disk(host), peers=peers(host),
    )
