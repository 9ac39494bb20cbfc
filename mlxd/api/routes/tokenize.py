"""``POST /tokenize``, ``POST /detokenize`` and ``POST /apply-template``."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.body import json_object, parse
from mlxd.api.chat import render
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.pieces import vocabulary
from mlxd.errors import InvalidRequest
from mlxd.schemas.tokenize import (
    ApplyTemplateResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenPiece,
)

bp = Blueprint("tokenize")


def _piece(raw: bytes) -> str | list[int]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


@bp.post("/tokenize")
async def tokenize(request: Request) -> HTTPResponse:
    body = parse(TokenizeRequest, json_object(request))
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    if body.content is None:
        return json_response(TokenizeResponse(tokens=[]).model_dump())
    ids = vocab.tokenize_mixed(body.content, add_special=body.add_special, parse_special=body.parse_special)
    if body.with_pieces:
        pieces = [TokenPiece(id=t, piece=_piece(vocab.piece(t))) for t in ids]
        return json_response(TokenizeResponse(tokens=pieces).model_dump())
    return json_response(TokenizeResponse(tokens=ids).model_dump())


@bp.post("/detokenize")
async def detokenize(request: Request) -> HTTPResponse:
    body = parse(DetokenizeRequest, json_object(request))
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    return json_response(DetokenizeResponse(content=vocab.detokenize(body.tokens)).model_dump())


@bp.post("/apply-template")
async def apply_template(request: Request) -> HTTPResponse:
    body = json_object(request)
    if "messages" not in body:
        raise InvalidRequest("'messages' is required")
    if not isinstance(body["messages"], list):
        raise InvalidRequest("Field 'messages': must be an array")
    prompt, _ = render(body, serving(request), served_model(request), body["messages"])
    return json_response(ApplyTemplateResponse(prompt=prompt.prompt).model_dump())
