"""What the admin listener reads from the daemon, as a protocol (the daemon imports admin, never the reverse)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from mlxd.schemas.admin import LastErrorView, ModelView, StatusResponse

if TYPE_CHECKING:
    from mlxd.config import Config, ResolvedConfig


class AdminHost(Protocol):
    """The daemon as the admin routes see it (mlxd.daemon.server.Daemon)."""

    state: Any  # an enum whose .value is starting | serving | reloading | draining | stopped
    resolved: "ResolvedConfig"  # the startup configuration
    controller: Any  # mlxd.daemon.controller.Controller, None until the default model is loaded
    serving: Any  # mlxd.api.state.ServingState
    shutdown: asyncio.Event


def daemon_state(host: AdminHost) -> str:
    """The daemon's state; ``reloading`` while a change holds the controller's lock."""
    state = str(getattr(host.state, "value", host.state))
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
        return [ModelView(name=e.name, state=e.state, error=e.error) for e in pool.entries()]
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


def status(host: AdminHost) -> StatusResponse:
    """``GET /v1/status``."""
    controller = host.controller
    started = host.serving.started_at if host.serving is not None else time.time()
    if controller is None:
        return StatusResponse(state=daemon_state(host), generation=0, config_hash=host.resolved.config_hash,
                              uptime=time.time() - started, last_error=None, pending_restart=[],
                              models=models(host))
    last = controller.last_error
    return StatusResponse(
        state=daemon_state(host), generation=controller.generation, config_hash=controller.resolved.config_hash,
        uptime=time.time() - started, pending_restart=list(controller.pending_restart), models=models(host),
        last_error=LastErrorView(trigger=last.trigger, message=last.message, time=last.time) if last else None,
        etag=controller.etag,
    )
