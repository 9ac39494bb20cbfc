"""The public sanic application: configuration, pre-routing checks, the error envelope, and every route module.

Route modules are discovered: each module of ``mlxd.api.routes`` that exposes ``bp`` (a sanic ``Blueprint``) is
mounted under ``--api-prefix``, so a new route family plugs in without editing this file.

The daemon serves the app in its own process and loop: it binds the socket itself (port 0 resolved, ``.sock``
hosts as Unix sockets), then ``await app.create_server(sock=..., ssl=..., return_asyncio_server=True)`` and runs
the returned server's startup/before_start/start_serving/after_start, logging ``listening on URL`` once bound.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil

from sanic import Blueprint, Sanic

from mlxd.api import middleware, request_log, router_mode, routes
from mlxd.api.errors import EnvelopeErrorHandler
from mlxd.api.metrics import ServerMetrics
from mlxd.api.state import ServingState
from mlxd.config import Config

log = logging.getLogger("mlxd.api")

# Request bodies over this size are refused with a 413 envelope before they are read.
BODY_LIMIT = 100 * 1024 * 1024
DEFAULT_TIMEOUT_SECONDS = 3600
NO_DEADLINE_SECONDS = 365 * 24 * 3600.0


def api_prefix(config: Config) -> str:
    """``--api-prefix`` as a path prefix: leading slash, no trailing slash, empty for none."""
    prefix = str(config.api_prefix or "").strip().rstrip("/")
    if prefix and not prefix.startswith("/"):
        prefix = "/" + prefix
    return prefix


def discover_blueprints() -> list[Blueprint]:
    """Every ``bp`` exposed by a module of ``mlxd.api.routes``, in module name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(routes.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{routes.__name__}.{info.name}")
        bp = getattr(module, "bp", None)
        if isinstance(bp, Blueprint):
            found.append(bp)
    return found


def _quiet_sanic() -> None:
    # Sanic logs through its own loggers; they propagate to the daemon's handlers, minus the per-request noise.
    for name in ("sanic.root", "sanic.server", "sanic.access", "sanic.websockets"):
        logging.getLogger(name).setLevel(logging.WARNING)


def create_app(state: ServingState, *, name: str = "mlxd", body_limit: int = BODY_LIMIT) -> Sanic:
    """The public API app over ``state``; ``name`` must be unique within the process."""
    _quiet_sanic()
    # strict_slashes: b10621 matches paths exactly, so /health/ is an unknown route there too.
    app = Sanic(name, configure_logging=False, error_handler=EnvelopeErrorHandler(), strict_slashes=True)
    timeout = float(state.config.timeout or DEFAULT_TIMEOUT_SECONDS)
    app.config.update(
        {
            "MOTD": False,
            "ACCESS_LOG": False,
            "NOISY_EXCEPTIONS": False,
            # TouchUp rewrites sanic's own code per process; with several apps in one process it breaks.
            "TOUCHUP": False,
            "REQUEST_MAX_SIZE": body_limit,
            # sanic's own protocol (the daemon serves through mlxd.daemon.connections, which applies --timeout
            # per read and per write): the head's deadline, and no deadline on a whole response, which b10621
            # does not have either (a long non-streamed generation is not cut).
            "REQUEST_TIMEOUT": min(timeout, float(state.config.timeout_header or NO_DEADLINE_SECONDS)),
            "RESPONSE_TIMEOUT": NO_DEADLINE_SECONDS,
            "KEEP_ALIVE_TIMEOUT": float(state.config.timeout_idle or NO_DEADLINE_SECONDS),
            "FALLBACK_ERROR_FORMAT": "json",
        }
    )
    if state.metrics is None:
        state.metrics = ServerMetrics()
    app.ctx.state = state
    prefix = api_prefix(state.config)
    request_log.install(app)
    middleware.install(app, state, prefix)
    router_mode.install(app, state, prefix)
    for bp in discover_blueprints():
        app.blueprint(bp, url_prefix=(prefix + (bp.url_prefix or "")) or None)
    return app
