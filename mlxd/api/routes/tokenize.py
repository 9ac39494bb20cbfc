"""``POST /tokenize``, ``POST /detokenize`` and ``POST /apply-template``."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import offload
from mlxd.json_out import dumps_long_list
from mlxd.api.body import json_object, parse
from mlxd.api.chat import render_off_loop
from mlxd.api.context import served_model, serving
from mlxd.api.errors import JSON_CONTENT_TYPE, dumps, json_response
from mlxd.api.pieces import Vocabulary, vocabulary
from mlxd.errors import InvalidRequest
from mlxd.schemas.tokenize import (
    ApplyTemplateResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

bp = Blueprint("tokenize")


def _piece(raw: bytes) -> str | list[int]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _tokenized(vocab: Vocabulary, data: dict[str, Any]) -> str:
    """The /tokenize answer as JSON text (pieces are one object per token: for a long text, a long list)."""
    body = parse(TokenizeRequest, data)
    if body.content is None:
        return dumps(TokenizeResponse(tokens=[]).model_dump())
    ids = vocab.tokenize_mixed(body.content, add_special=body.add_special, parse_special=body.parse_special)
    tokens: list[Any] = [{"id": t, "piece": _piece(vocab.piece(t))} for t in ids] if body.with_pieces else ids
    return '{"tokens":' + dumps_long_list(tokens) + "}"


@bp.post("/tokenize")
async def tokenize(request: Request) -> HTTPResponse:
    data = json_object(request)
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    text = await offload.run(_tokenized, vocab, data, size=len(request.body or b""))
    return HTTPResponse(text, content_type=JSON_CONTENT_TYPE)


def _detokenized(vocab: Vocabulary, data: dict[str, Any]) -> str:
    tokens = parse(DetokenizeRequest, data).tokens
    return dumps(DetokenizeResponse(content=vocab.detokenize(tokens)).model_dump())


@bp.post("/detokenize")
async def detokenize(request: Request) -> HTTPResponse:
    data = json_object(request)
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    text = await offload.run(_detokenized, vocab, data, size=len(request.body or b""))
    return HTTPResponse(text, content_type=JSON_CONTENT_TYPE)


@bp.post("/apply-template")
async def apply_template(request: Request) -> HTTPResponse:
    body = json_object(request)
    if "messages" not in body:
        raise InvalidRequest("'messages' is required")
    if not isinstance(body["messages"], list):
        raise InvalidRequest("Field 'messages': must be an array")
    prompt, _ = await render_off_loop(request, body, serving(request), served_model(request), body["messages"])
    return json_response(ApplyTemplateResponse(prompt=prompt.prompt).model_dump())
