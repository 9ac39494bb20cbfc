"""``GET /health`` and ``GET /v1/health``: 200 ``{"status": "ok"}`` once a model serves (the gate answers 503
before)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.context import serving
from mlxd.api.errors import json_response

bp = Blueprint("health")


@bp.get("/health", name="health")
@bp.get("/v1/health", name="v1_health")
async def health(request: Request) -> HTTPResponse:
    model = serving(request).model
    # A model split across machines whose group is down (a peer lost, re-forming): 503 with the reason.
    down = getattr(model.worker, "down_reason", None) if model is not None else None
    if isinstance(down, str):
        return json_response({"error": {"code": 503, "message": f"the distributed model is not serving: {down}",
                                        "type": "unavailable_error"}}, 503, headers={"Retry-After": "2"})
    return json_response({"status": "ok"})
