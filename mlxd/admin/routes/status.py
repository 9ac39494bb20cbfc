"""``GET /v1/status``: the daemon's state, generation, config hash, last error, pending restarts and models."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.admin.host import status as status_of

bp = Blueprint("admin_status")


@bp.get("/v1/status", name="status", ctx_kind="read")
async def status(request: Request) -> HTTPResponse:
    body = status_of(request.app.ctx.host)
    headers = {"ETag": f'"{body.etag}"'} if body.etag else None
    return json_response(body.model_dump(), headers=headers)
