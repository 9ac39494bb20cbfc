"""``/v1/models``: list, load and unload. In single-model mode, loading swaps the served model through the
controller (the new one loads before the old one drains) and unloading serves no model. In router mode they load
and unload the pool's models through the controller too: a committed generation each (the configuration is
unchanged), the states recorded as model events."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError
from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.admin.body import change_response, json_object
from mlxd.admin.host import AdminController, AdminHost, model_label, models, serving_state
from mlxd.config import UNSET
from mlxd.errors import AdminError, RequestError
from mlxd.schemas.admin import ModelsPost, ModelsResponse

bp = Blueprint("admin_models")


def _names(cfg: Any) -> set[str]:
    return {n for n in (model_label(cfg), cfg.model, cfg.hf_repo, *(cfg.alias or [])) if n}


def _unknown(name: str) -> AdminError:
    return AdminError("unknown_model", f"no model named {name!r}: in single-model mode, load takes a checkpoint "
                      "directory or the configured model's name", 404)


async def _router(host: AdminHost, action: str, name: str) -> HTTPResponse:
    """Router mode: load (waiting until it is loaded) or unload a pool model through the controller."""
    controller = _controller(host)
    try:
        if action == "load":
            result = await controller.load_pool_model(name, trigger=f"admin:load {name}", wait=True)
        else:
            result = await controller.unload_pool_model(name, trigger=f"admin:unload {name}")
    except RequestError as exc:
        code = "unknown_model" if "not found" in exc.message else "model_state"
        raise AdminError(code, f"model {name!r}: {exc.message}", 404 if code == "unknown_model" else 409) from exc
    if result.error is not None:
        raise AdminError("load_failed", result.error, 500)
    return change_response(result, controller)


def _controller(host: AdminHost) -> AdminController:
    if host.controller is None:
        raise AdminError("unavailable", "the daemon is starting; retry when it is serving", 503)
    return host.controller


async def load(host: AdminHost, name: str) -> HTTPResponse:
    controller = _controller(host)
    current = controller.resolved
    serving = serving_state(host)
    if serving.pool is not None:
        return await _router(host, "load", name)
    served = serving.model
    if served is not None and (name == served.name or name in served.aliases or name in _names(current.config)):
        values: dict[str, Any] = {}  # already served: nothing to change
    elif os.path.isdir(name):
        # A directory is always named explicitly: the files may have moved on since startup, so "the model they
        # name" is not necessarily this one.
        values = {"model": name, "hf-repo": None}
    elif name in _names(current.config) or name in _names(host.resolved.config):
        values = {"model": UNSET, "hf-repo": UNSET}  # back to the model the files and command line name
    else:
        raise _unknown(name)
    return change_response(await controller.patch(values, trigger=f"admin:load {name}"), controller)


async def unload(host: AdminHost, name: str) -> HTTPResponse:
    controller = _controller(host)
    serving = serving_state(host)
    if serving.pool is not None:
        return await _router(host, "unload", name)
    served = serving.model
    if served is None or not (name == served.name or name in served.aliases or name in _names(
            controller.resolved.config)):
        raise AdminError("not_loaded", f"model {name!r} is not loaded", 404)
    values = {"model": None, "hf-repo": None}
    return change_response(await controller.patch(values, trigger=f"admin:unload {name}"), controller)


@bp.get("/v1/models", ctx_kind="read")
async def list_models(request: Request) -> HTTPResponse:
    host = request.app.ctx.host
    body = ModelsResponse(mode="router" if serving_state(host).pool is not None else "single", models=models(host))
    return json_response(body.model_dump())


@bp.post("/v1/models", ctx_kind="write")
async def post_models(request: Request) -> HTTPResponse:
    """``{"action": "load"|"unload", "name": NAME}``: the form for names that are paths."""
    try:
        body = ModelsPost.model_validate(json_object(request))
    except ValidationError as exc:
        raise AdminError("invalid_body", str(exc).splitlines()[0]) from exc
    action = load if body.action == "load" else unload
    return await action(request.app.ctx.host, body.name)


@bp.post("/v1/models/<name:str>/load", ctx_kind="write")
async def load_model(request: Request, name: str) -> HTTPResponse:
    return await load(request.app.ctx.host, name)


@bp.post("/v1/models/<name:str>/unload", ctx_kind="write")
async def unload_model(request: Request, name: str) -> HTTPResponse:
    return await unload(request.app.ctx.host, name)
