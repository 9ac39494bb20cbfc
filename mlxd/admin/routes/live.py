"""``GET /v1/slots`` and ``GET /v1/metrics/summary``: the slots and load counters the operator console shows, read
from the daemon (the public ``/slots`` and ``/metrics`` compute them; the admin listener never serves a public route)."""

from __future__ import annotations

import time

from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.errors import AdminError
from mlxd.schemas.admin import MetricsSummaryResponse, SlotsResponse

bp = Blueprint("admin_live")

STARTING = "the daemon is starting; retry when it is serving"


@bp.get("/v1/slots", ctx_kind="read", ctx_polled=True)
async def get_slots(request: Request) -> HTTPResponse:
    slots = request.app.ctx.host.slots_summary()
    if slots is None:
        raise AdminError("unavailable", STARTING, 503)
    return json_response(SlotsResponse(models=slots).model_dump())


@bp.get("/v1/metrics/summary", ctx_kind="read", ctx_polled=True)
async def get_metrics_summary(request: Request) -> HTTPResponse:
    counters = request.app.ctx.host.load_summary()
    if counters is None:
        raise AdminError("unavailable", STARTING, 503)
    return json_response(MetricsSummaryResponse(time=time.time(), **counters).model_dump())
