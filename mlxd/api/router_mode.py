"""Router mode, before a route runs: pick the handler by mode and the model a request names (docs/precedence.md
rule 2.16).

b10621 swaps handlers when it starts as a router: ``GET /models`` and ``/v1/models`` list the router's models,
``GET /props`` without ``?model=`` describes the router, and every other model route is served by the model the
request names, ``"model"`` in a POST body or ``?model=`` on a GET (aliases resolve to the canonical name),
loaded on demand unless autoload is off (``--no-models-autoload``, or ``?autoload=`` per request: ``true`` or
``1`` turn it on, any other non-empty value off). The route then sees that model and its own configuration. The
model is held until the response starts, so an eviction waits for requests that picked it; its worker then drains
what they submitted.
"""

from __future__ import annotations

from dataclasses import replace

from sanic import HTTPResponse, Request, Sanic

from mlxd.api.body import json_body
from mlxd.api.routes.router_models import inventory_response, router_props
from mlxd.api.state import ServingState

# Routes the router answers itself, whatever the request names (stream sessions are found by their id).
ROUTER_OWN = frozenset({"/health", "/v1/health", "/models/load", "/models/unload", "/models/sse", "/tools",
                        "/cors-proxy", "/v1/stream", "/v1/streams/lookup"})
# The chat page's conversation store (mlxd.web.STORE_PREFIX) names no model.
ROUTER_OWN_PREFIXES = ("/webui/",)
INVENTORY = frozenset({"/models", "/v1/models"})


def autoload_param(request: Request) -> bool | None:
    """``?autoload=``: None when absent or empty (the server's --models-autoload applies)."""
    value = request.args.get("autoload")
    if not value:
        return None
    return value in ("true", "1")


def requested_model(request: Request) -> str | None:
    """The name a request gives: the body's ``model`` for a POST, ``?model=`` otherwise."""
    if request.method == "POST":
        body = json_body(request)
        name = body.get("model") if isinstance(body, dict) else None
        return name if isinstance(name, str) else None
    return request.args.get("model")


def install(app: Sanic, state: ServingState, prefix: str = "") -> None:
    """Register the router's request routing on ``app`` (it does nothing while the app serves one model)."""

    async def route_to_model(request: Request) -> HTTPResponse | None:
        pool = state.pool
        if pool is None or request.method == "OPTIONS" or request.route is None:
            return None
        path = request.path[len(prefix):] if prefix and request.path.startswith(prefix) else request.path
        if path in ROUTER_OWN or path.startswith(ROUTER_OWN_PREFIXES):
            return None
        if request.method == "GET" and path in INVENTORY:
            return await inventory_response(request)
        name = requested_model(request)
        if request.method == "GET" and path == "/props" and not name:
            return router_props(state)
        model = await pool.acquire(name, autoload_param(request), touch=request.method == "POST")
        request.ctx.model = model
        # Routes read options from the serving state: here they are the model's own (its preset's, rule 2.15).
        request.ctx.serving = replace(state, model=model, config=model.config or state.config)
        return None

    async def release(request: Request, response: HTTPResponse) -> None:
        model = getattr(request.ctx, "model", None)
        if model is not None and state.pool is not None and not getattr(request.ctx, "released", False):
            request.ctx.released = True
            state.pool.release(model)

    # After the pre-routing gate (priority 100): CORS preflight, the loading gate and the API key come first.
    app.on_request(route_to_model, priority=50)
    app.on_response(release, priority=50)
