"""``POST /tokenize``, ``POST /detokenize`` and ``POST /apply-template``."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import offload
from mlxd.api.body import json_object, parse
from mlxd.api.chat import render_off_loop
from mlxd.api.context import served_model, serving
from mlxd.api.errors import dumps, json_response
from mlxd.api.large_body import long_list_parts, send_bytes, send_parts
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


def _tokenized(vocab: Vocabulary, request: Request) -> list[bytes]:
    """The /tokenize answer as encoded JSON (pieces are one object per token: for a long text, a long list); the
    body is read here too, on the offload pool, since it is as long as the text."""
    body = parse(TokenizeRequest, json_object(request))
    if body.content is None:
        return [dumps(TokenizeResponse(tokens=[]).model_dump()).encode()]
    ids = vocab.tokenize_mixed(body.content, add_special=body.add_special, parse_special=body.parse_special)
    tokens: list[Any] = [{"id": t, "piece": _piece(vocab.piece(t))} for t in ids] if body.with_pieces else ids
    return long_list_parts('{"tokens":', tokens, "}")


@bp.post("/tokenize")
async def tokenize(request: Request) -> HTTPResponse | None:
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    return await send_parts(request, await offload.run(_tokenized, vocab, request, size=len(request.body or b"")))


def _detokenized(vocab: Vocabulary, request: Request) -> bytes:
    tokens = parse(DetokenizeRequest, json_object(request)).tokens
    return dumps(DetokenizeResponse(content=vocab.detokenize(tokens)).model_dump()).encode()


@bp.post("/detokenize")
async def detokenize(request: Request) -> HTTPResponse | None:
    vocab = vocabulary(served_model(request).loaded.tokenizer)
    return await send_bytes(request, await offload.run(_detokenized, vocab, request, size=len(request.body or b"")))


@bp.post("/apply-template")
async def apply_template(request: Request) -> HTTPResponse:
    body = json_object(request)
    if "messages" not in body:
        raise InvalidRequest("'messages' is required")
    if not isinstance(body["messages"], list):
        raise InvalidRequest("Field 'messages': must be an array")
    prompt, _ = await render_off_loop(request, body, serving(request), served_model(request), body["messages"])
    return json_response(ApplyTemplateResponse(prompt=prompt.prompt).model_dump())
