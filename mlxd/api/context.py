"""What a route handler reads from its request: the serving state and the model in service."""

from __future__ import annotations

from sanic import Request

from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.errors import Unavailable


def serving(request: Request) -> ServingState:
    """The ``ServingState`` the request is served from: the app's, or in router mode a view of it with the model
    the request named and that model's configuration (set by mlxd.api.router_mode before the route runs)."""
    state: ServingState = getattr(request.ctx, "serving", None) or request.app.ctx.state
    return state


def served_model(request: Request) -> ServedModel:
    """The model this request is served by (in router mode the one it named); the loading gate answers before a
    route runs, so None here is a swap in progress."""
    model = serving(request).model
    if model is None:
        raise Unavailable("Loading model")
    return model
