"""``/tools`` and ``/cors-proxy``: b10621's agent tools and MCP proxy, which mlxd does not offer (403, as when off)."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.errors import feature_disabled

bp = Blueprint("disabled")


@bp.route("/tools", methods=["GET", "POST"], name="tools")
@bp.route("/cors-proxy", methods=["GET", "POST"], name="cors_proxy")
async def disabled(request: Request) -> HTTPResponse:
    return feature_disabled()
