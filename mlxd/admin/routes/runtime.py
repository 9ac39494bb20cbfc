"""``/v1/logging`` and ``/v1/lora``: live settings, changed as admin overrides through the controller."""

from __future__ import annotations

import os
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.admin.body import change_response, if_match, json_object
from mlxd.admin.host import serving_state
from mlxd.config import table
from mlxd.config.render import shown
from mlxd.errors import AdminError
from mlxd.schemas.admin import LoggingResponse, LoraResponse

bp = Blueprint("admin_runtime")

# The options whose only effect is on logging (the option table's ``effect=logging`` rows).
LOG_OPTIONS = tuple(spec.name for spec in table() if spec.effects == ("logging",))


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
    host = request.app.ctx.host
    model = serving_state(host).model
    adapters = [{"id": a["id"], "path": str(a["path"]), "scale": float(a["scale"])}
                for a in host.controller.lora_state()]
    return json_response(LoraResponse.model_validate({"model": model.name if model else None,
                                                      "adapters": adapters}).model_dump())


def _adapter_id(entries: list[dict[str, Any]], key: str) -> int:
    """An adapter named by its id, its path, or its directory's name."""
    for entry in entries:
        path = str(entry["path"])
        if key in (str(entry["id"]), path, os.path.basename(path.rstrip("/"))):
            return int(entry["id"])
    raise AdminError("unknown_adapter", f"no LoRA adapter {key!r} is loaded "
                     f"({', '.join(str(e['path']) for e in entries) or 'none'})", 404)


@bp.put("/v1/lora", ctx_kind="write")
async def put_lora(request: Request) -> HTTPResponse:
    """``{"ID_OR_PATH_OR_NAME": SCALE, ...}``: adapters not named keep their scale. The scales become the admin
    layer's ``lora-scaled`` (a new generation and config hash) and apply live to the loaded adapters, without a
    reload; a request already admitted keeps its scales."""
    controller = request.app.ctx.host.controller
    entries = controller.lora_state()
    scales = {int(e["id"]): float(e["scale"]) for e in entries}
    for key, scale in json_object(request).items():
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise AdminError("invalid_body", f"the scale of {key!r} must be a number")
        scales[_adapter_id(entries, key)] = float(scale)
    result = await controller.set_lora_scales(scales, trigger="admin:lora", if_match=if_match(request))
    return change_response(result, controller)
