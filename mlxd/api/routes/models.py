"""``GET /models`` and ``GET /v1/models``: b10621's single-model list (an Ollama-style entry and an OpenAI one)."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.media_parts import modalities_of
from mlxd.api.model_facts import ftype, n_ctx_slot, n_embd
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.schemas.models import ModelEntry, ModelList, ModelMeta, OllamaDetails, OllamaModel

bp = Blueprint("models")


@bp.get("/models", name="models")
@bp.get("/v1/models", name="v1_models")
async def models(request: Request) -> HTTPResponse:
    return json_response(models_body(serving(request), served_model(request)))


def models_body(state: ServingState, model: ServedModel) -> dict[str, Any]:
    """The single-model list for the model in service."""
    loaded = model.loaded
    kind = ftype(model)
    meta = ModelMeta(
        n_vocab=loaded.vocab_size,
        n_ctx=n_ctx_slot(model),
        n_ctx_train=loaded.n_ctx_train,
        n_embd=n_embd(model),
        n_params=loaded.n_params,
        size=loaded.size_bytes,
        ftype=kind,
    )
    tags = sorted(set(state.config.tags or []))  # a std::set in b10621: sorted, unique
    body = ModelList(
        models=[OllamaModel(name=model.name, model=model.name, details=OllamaDetails(),
                            capabilities=["completion", "multimodal"] if modalities_of(model).multimodal
                            else ["completion"])],
        data=[
            ModelEntry(id=model.name, aliases=model.aliases or [model.name], tags=tags,
                       created=int(model.loaded_at), meta=meta)
        ],
    )
    return body.model_dump()
