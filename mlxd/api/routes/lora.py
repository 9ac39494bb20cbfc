"""``GET /lora-adapters`` (the loaded adapters and their scales) and ``POST /lora-adapters``.

Changing scales at run time goes through the reconcile path (the admin API); until it is wired here, ``POST``
refuses with 501 rather than pretending to apply a change.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.body import json_body
from mlxd.api.context import served_model
from mlxd.api.errors import json_response
from mlxd.errors import InvalidRequest, NotSupported

bp = Blueprint("lora")

POST_UNAVAILABLE = "This server does not support changing LoRA adapter scales at run time yet (mlxd: deferred)"


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
    if not isinstance(json_body(request), list):
        raise InvalidRequest("Request body must be an array")
    raise NotSupported(POST_UNAVAILABLE)
