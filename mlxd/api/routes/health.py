"""``GET /health`` and ``GET /v1/health``: 200 ``{"status": "ok"}`` once a model serves (the gate answers 503
before)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.errors import json_response

bp = Blueprint("health")


@bp.get("/health", name="health")
@bp.get("/v1/health", name="v1_health")
async def health(request: Request) -> HTTPResponse:
    return json_response({"status": "ok"})
