"""``GET /v1/models`` in single-model mode: b10621's key set, entry for entry."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class OllamaDetails(BaseModel):
    parent_model: str = ""
    format: str = "mlx"
    family: str = ""
    families: list[str] = [""]
    parameter_size: str = ""
    quantization_level: str = ""


class OllamaModel(BaseModel):
    """The ``models`` entry (b10621 fills it with empty strings except the names)."""

    name: str
    model: str
    modified_at: str = ""
    size: str = ""
    digest: str = ""
    type: str = "model"
    description: str = ""
    tags: list[str] = [""]
    capabilities: list[str] = ["completion"]
    parameters: str = ""
    details: OllamaDetails


class ModelMeta(BaseModel):
    # b10621 writes the vocabulary type as a JSON boolean; mlxd keeps that shape.
    vocab_type: bool = True
    n_vocab: int
    n_ctx: int
    n_ctx_train: int
    n_embd: int
    n_params: int
    size: int
    ftype: str


class ModelEntry(BaseModel):
    """The OpenAI-style ``data`` entry."""

    id: str
    aliases: list[str]
    tags: list[str]
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llamacpp"
    meta: ModelMeta


class ModelList(BaseModel):
    models: list[OllamaModel]
    object: Literal["list"] = "list"
    data: list[ModelEntry]
