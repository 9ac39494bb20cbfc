"""What a route handler reads from its request: the serving state and the model in service."""

from __future__ import annotations

from sanic import Request

from mlxd.api.state import ServedModel, ServingState
from mlxd.errors import Unavailable


def serving(request: Request) -> ServingState:
    """The ``ServingState`` the app was created with."""
    state: ServingState = request.app.ctx.state
    return state


def served_model(request: Request) -> ServedModel:
    """The model this request is served by: in router mode the one it named (picked before the route runs, see
    mlxd.api.router_mode), else the model in service; the loading gate answers before a route runs, so None here
    is a swap in progress."""
    model = getattr(request.ctx, "model", None) or serving(request).model
    if model is None:
        raise Unavailable("Loading model")
    return model
