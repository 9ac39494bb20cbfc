"""The admin listener's sanic app: bearer auth, the daemon-state gate, one log line per request, and the one
renderer of admin errors (``{"error": {"code", "message"}}`` with a stable code)."""

from __future__ import annotations

import logging
import time

from sanic import DefaultSanic, HTTPResponse, Request, Sanic
from sanic import exceptions as sanic_exc
from sanic.handlers import ErrorHandler

from mlxd.admin.auth import check_bearer
from mlxd.admin.host import AdminHost, daemon_state
from mlxd.admin.responses import error_response
from mlxd.admin.routes import blueprints
from mlxd.errors import AdminError, MlxdError

log = logging.getLogger("mlxd.admin")

class AdminErrorHandler(ErrorHandler):
    """Every exception on the admin listener ends here; a traceback is logged, never sent."""

    def default(self, request: Request, exception: Exception) -> HTTPResponse:
        if isinstance(exception, AdminError):
            return error_response(exception.code, exception.message, exception.status)
        if isinstance(exception, sanic_exc.NotFound):
            return error_response("not_found", f"no admin endpoint {request.path}", 404)
        if isinstance(exception, sanic_exc.MethodNotAllowed):
            return error_response("method_not_allowed", f"{request.method} is not allowed on {request.path}", 405)
        if isinstance(exception, sanic_exc.SanicException) and exception.status_code < 500:
            return error_response("bad_request", str(exception), exception.status_code)
        if isinstance(exception, MlxdError):
            return error_response("failed", str(exception), 500)
        log.error("%s %s failed", request.method, request.path, exc_info=exception)
        return error_response("internal", "internal error; see the daemon's log", 500)


# Reads that need only the daemon, not a running configuration.
_ALWAYS = frozenset({"status"})


def _gate(host: AdminHost, request: Request) -> None:
    """The daemon-state check every admin call starts with."""
    route = request.route
    if route is None:
        return
    kind = getattr(route.ctx, "kind", "read")
    state = daemon_state(host)
    if route.name.rsplit(".", 1)[-1] in _ALWAYS:
        return
    if state in ("draining", "stopped"):
        raise AdminError("unavailable", f"the daemon is {state}", 503)
    if host.controller is None:
        raise AdminError("unavailable", "the daemon is starting; retry when it is serving", 503)
    if kind == "write" and state == "starting":
        raise AdminError("unavailable", "the daemon is starting; retry when it is serving", 503)


def create_admin_app(host: AdminHost, *, token: str | None, name: str) -> DefaultSanic:
    """The admin app for ``host`` (the daemon); ``token`` is required from clients when given."""
    app = Sanic(name, configure_logging=False, error_handler=AdminErrorHandler(), strict_slashes=True)
    app.config.KEEP_ALIVE_TIMEOUT = 5
    app.config.REQUEST_MAX_SIZE = 8 * 1024 * 1024
    app.ctx.host = host
    for bp in blueprints():
        app.blueprint(bp)

    @app.on_request
    async def _auth_and_gate(request: Request) -> None:
        request.ctx.started = time.monotonic()
        route = request.route
        if route is not None and getattr(route.ctx, "kind", "") == "page":
            return  # the console's own files hold no data (mlxd.admin.routes.console)
        check_bearer(request.headers.get("authorization"), token)
        _gate(host, request)

    @app.on_response
    async def _log_line(request: Request, response: HTTPResponse) -> None:
        started = getattr(request.ctx, "started", None)
        elapsed = (time.monotonic() - started) * 1000 if started is not None else 0.0
        # The console polls its live reads every second: those lines go to debug, or they would fill the log.
        polled = request.route is not None and getattr(request.route.ctx, "polled", False) and response.status < 400
        log.log(logging.DEBUG if polled else logging.INFO, "%s %s -> %d (%.1f ms)", request.method, request.path,
                response.status, elapsed)

    return app
