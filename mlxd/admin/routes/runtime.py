"""``/v1/logging`` and ``/v1/lora``: live settings, changed as admin overrides through the controller."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.app import json_response
from mlxd.admin.body import change_response, if_match, json_object
from mlxd.config import table
from mlxd.config.render import shown
from mlxd.errors import AdminError
from mlxd.schemas.admin import LoggingResponse, LoraResponse

bp = Blueprint("admin_runtime")

LOG_OPTIONS = ("log-disable", "log-file", "log-verbosity", "log-verbose", "log-colors", "log-prefix",
               "log-timestamps")


@bp.get("/v1/logging", ctx_kind="read")
async def get_logging(request: Request) -> HTTPResponse:
    resolved = request.app.ctx.host.controller.resolved
    options = {name: {"value": shown(table().get(name), resolved.value(name)), "source": resolved.provenance[name]}
               for name in LOG_OPTIONS}
    return json_response(LoggingResponse.model_validate({"options": options}).model_dump())


@bp.put("/v1/logging", ctx_kind="write")
async def put_logging(request: Request) -> HTTPResponse:
    """``{"log-verbosity": 4, ...}``: only log options; they take effect on the next line."""
    controller = request.app.ctx.host.controller
    values = json_object(request)
    by_key = table().by_key
    others = sorted(k for k in values if k not in by_key or by_key[k].name not in LOG_OPTIONS)
    if others:
        raise AdminError("unknown_option", f"not a log option: {', '.join(others)} "
                         f"(log options: {', '.join(LOG_OPTIONS)}; use PATCH /v1/config for others)")
    result = await controller.patch(values, trigger="admin:logging", if_match=if_match(request))
    return change_response(result, controller)


@bp.get("/v1/lora", ctx_kind="read")
async def get_lora(request: Request) -> HTTPResponse:
    model = request.app.ctx.host.serving.model
    listed = getattr(model.worker, "lora_adapters", None) if model is not None else None
    entries = listed() if callable(listed) else []
    adapters = [{"id": i, "path": str(a.get("path", "")), "scale": float(a.get("scale", 0.0))}
                for i, a in enumerate(entries)]
    return json_response(LoraResponse.model_validate({"model": model.name if model else None,
                                                      "adapters": adapters}).model_dump())


@bp.put("/v1/lora", ctx_kind="write")
async def put_lora(request: Request) -> HTTPResponse:
    """``{"ADAPTER_PATH_OR_ID": SCALE, ...}``. Runtime scales need the engine's unfused adapters, which this
    build does not have; refusing is better than reloading the model behind the caller's back."""
    json_object(request)
    raise AdminError("not_available", "changing LoRA scales at run time is not available in this build; set "
                     "--lora-scaled in the configuration (PATCH /v1/config) to reload the model with new scales",
                     501)
