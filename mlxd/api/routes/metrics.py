"""``GET /metrics`` (``--metrics``): Prometheus text, b10621's families first."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import metrics
from mlxd.api.context import serving
from mlxd.config import config_hash
from mlxd.errors import NotSupported

bp = Blueprint("metrics")

METRICS_DISABLED = "This server does not support metrics endpoint. Start it with `--metrics`"


@bp.get("/metrics")
async def get_metrics(request: Request) -> HTTPResponse:
    state = serving(request)
    if not state.config.metrics:
        raise NotSupported(METRICS_DISABLED)
    registry = state.metrics
    model = state.model
    # Asleep, every family stays as the last scrape awake showed it (b10621 answers its snapshot from before
    # sleeping), mlxd's own generation too: falling asleep is a committed change, shown once the model wakes.
    if model is not None or not state.sleeping:
        registry.config_hash = config_hash(state.config)
        if state.controller is not None:
            registry.generation, registry.last_change = state.controller.generation, state.controller.last_result
        registry.model_name = model.name if model is not None else ""
    if model is not None:
        processing = sum(1 for slot in model.worker.slots() if slot.get("is_processing"))
        registry.set_load(processing, int(getattr(model.worker, "n_in_flight", processing)) - processing)
        registry.follow(model.worker)
    return HTTPResponse(
        metrics.render(registry.registry),
        content_type=metrics.CONTENT_TYPE,
        headers={"Process-Start-Time-Unix": metrics.process_start_time(state.started_at)},
    )
