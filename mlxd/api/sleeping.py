"""What a sleeping single-model server answers without waking its model (b10621's ``is_sleeping``): the bodies of
``GET /props``, ``/models`` and ``/v1/models`` as the model in service gave them when it fell asleep."""

from __future__ import annotations

from typing import Any

from mlxd.api.routes.models import models_body
from mlxd.api.routes.props import props_body
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel


def sleeping_views(state: ServingState, model: ServedModel) -> dict[str, dict[str, Any]]:
    """Route path -> the body it answers while the model sleeps."""
    models = models_body(state, model)
    return {"/props": props_body(state, model, sleeping=True), "/models": models, "/v1/models": models}
