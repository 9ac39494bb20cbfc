"""``GET /lora-adapters`` (the loaded adapters and their scales) and ``POST /lora-adapters`` (set them).

A ``POST`` changes scales through the daemon's reconcile controller, the same path as the admin API's
``/v1/lora``: the scales become the admin layer's ``lora-scaled`` and apply live to the loaded adapters, one
committed change with its generation and event. Requests already admitted keep the
scales they started with.
"""

from __future__ import annotations

import math
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.body import json_body
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.errors import InvalidRequest, Unavailable

bp = Blueprint("lora")


def adapters(model: Any) -> list[dict[str, Any]]:
    """b10621's adapter list: index, path, scale, task name and prompt prefix per adapter."""
    listed = getattr(model.worker, "lora_adapters", None)
    entries = listed() if callable(listed) else []
    return [
        {
            "id": i,
            "path": str(a.get("path", "")),
            "scale": float(a.get("scale", 0.0)),
            "task_name": str(a.get("task_name", "")),
            "prompt_prefix": str(a.get("prompt_prefix", "")),
        }
        for i, a in enumerate(entries)
    ]


@bp.get("/lora-adapters")
async def get_lora_adapters(request: Request) -> HTTPResponse:
    return json_response(adapters(served_model(request)))


@bp.post("/lora-adapters")
async def post_lora_adapters(request: Request) -> HTTPResponse:
    body = json_body(request)
    if not isinstance(body, list):
        raise InvalidRequest("Request body must be an array")
    model = served_model(request)
    n_adapters = len(model.worker.lora_adapters())
    # b10621 replaces the server-wide scales: adapters not listed get 0, ids no adapter has are ignored.
    scales = {i: s for i, s in parse_lora_request(body).items() if 0 <= i < n_adapters}
    controller = serving(request).controller
    if controller is None:  # the app without its daemon: there is no owner to change the scales
        if n_adapters:
            raise Unavailable("LoRA scales change through the daemon's reconcile path, which this app lacks")
        return json_response({"success": True})
    result = await controller.set_lora_scales(scales, trigger="api:lora-adapters")
    if result.error:
        raise InvalidRequest(result.error)
    return json_response({"success": True})


def parse_lora_request(entries: list[Any]) -> dict[int, float]:
    """``[{"id", "scale"}]`` read as b10621 reads it: a missing or unreadable id is -1, a missing or unreadable
    scale 0.0, and a later entry for the same id wins."""
    scales: dict[int, float] = {}
    for entry in entries:
        scales[int(_number(entry, "id", -1))] = float(_number(entry, "scale", 0.0))
    return scales


def _number(entry: Any, key: str, default: float) -> float:
    # nlohmann's get<int>/get<float> accept booleans and both number kinds; anything else falls back to default.
    value = entry.get(key) if isinstance(entry, dict) else None
    if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return default
