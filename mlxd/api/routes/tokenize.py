"""``POST /tokenize``, ``POST /detokenize`` and ``POST /apply-template``."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import offload
from mlxd.api.body import json_object, parse
from mlxd.api.chat import render_off_loop
from mlxd.api.context import served_model, serving
from mlxd.api.errors import dumps, json_response
from mlxd.api.large_body import PART_ITEMS, long_list_parts, release_list, send_bytes, send_parts
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


def _with_pieces(vocab: Vocabulary, ids: list[int], chunk: int = PART_ITEMS) -> list[bytes]:
    """``{"tokens":[{"id":..,"piece":..},...]}`` in encoded parts, the same bytes as ``long_list_parts`` over the
    list of objects, without that list. Millions of small dicts held at once were freed in one C loop when the
    request ended, holding the GIL (and so /health) for 0.4 s on a 10 MB text; here each token's text is encoded
    once per request (the compact encoder writes a list as its items' own encodings joined by commas) and each
    part's strings die with the part."""
    memo: dict[int, str] = {}

    def item(token: int) -> str:
        text = memo.get(token)
        if text is None:
            text = memo[token] = dumps({"id": token, "piece": _piece(vocab.piece(token))})
        return text

    parts = [b'{"tokens":[']
    for start in range(0, len(ids), chunk):
        parts.append((("," if start else "") + ",".join([item(t) for t in ids[start:start + chunk]])).encode())
    parts.append(b"]}")
    return parts


def _tokenized(vocab: Vocabulary, request: Request) -> list[bytes]:
    """The /tokenize answer as encoded JSON (pieces are one object per token: for a long text, a long list); the
    body is read here too, on the offload pool, since it is as long as the text."""
    body = parse(TokenizeRequest, json_object(request))
    if body.content is None:
        return [dumps(TokenizeResponse(tokens=[]).model_dump()).encode()]
    ids = vocab.tokenize_mixed(body.content, add_special=body.add_special, parse_special=body.parse_special)
    try:
        return _with_pieces(vocab, ids) if body.with_pieces else long_list_parts('{"tokens":', ids, "}")
    finally:
        release_list(ids)  # millions of ints, freed a part at a time rather than in one GIL-holding call


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
