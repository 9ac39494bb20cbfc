"""``/embedding(s)``, ``/v1/embeddings`` and ``/rerank`` with its aliases.

b10621 serves these only in its embedding mode (``--embeddings``; ``--reranking`` implies it with ``rank``
pooling) and refuses them otherwise with a 501. With the mode on, mlxd pools the model's hidden states per
``--pooling`` and normalises per ``--embd-normalize`` (mlxd.engine.embed), on the model's worker thread. Reranking
needs a classification head: a Qwen3 reranker's is its output layer's yes/no rows; the daemon refuses
``--reranking`` at startup for any other checkpoint, and the rerank routes say why if the mode is switched on later.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.large_body import send_json
from mlxd.api import offload
from mlxd.api.body import json_object
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.prompts import encode, tokenize_prompts
from mlxd.engine import embed
from mlxd.errors import InvalidRequest, NotSupported

bp = Blueprint("embeddings")

EMBEDDINGS_OFF = "This server does not support embeddings. Start it with `--embeddings`"
RERANKING_OFF = "This server does not support reranking. Start it with `--reranking`"
POOLING_NONE_OAI = "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
NO_INPUT = "\"input\" or \"content\" must be provided"
BAD_FORMAT = "The format to return the embeddings in. Can be either float or base64"
EMPTY_INPUT = "Input content cannot be empty"
RANK_EMBEDDINGS = ("pooling rank yields relevance scores, not embeddings (b10621 would answer a vector holding "
                   "them and unrelated values): use /rerank, or --pooling mean, cls or last")


def _embedding_mode(request: Request) -> bool:
    config = serving(request).config
    return bool(config.embeddings or config.reranking)


def _pooling(request: Request) -> str:
    config = serving(request).config
    return embed.effective_pooling(config.pooling, bool(config.reranking),
                                   served_model(request).loaded.path)


@bp.post("/embedding")
@bp.post("/embeddings", name="embeddings_alias")
async def embedding(request: Request) -> HTTPResponse | None:
    return await _embeddings(request, oai=False)


@bp.post("/v1/embeddings")
async def embeddings_oai(request: Request) -> HTTPResponse | None:
    return await _embeddings(request, oai=True)


async def _embeddings(request: Request, *, oai: bool) -> HTTPResponse | None:
    """b10621's ``handle_embeddings_impl``: checks in its order, one result per input, native or OpenAI shape."""
    if not _embedding_mode(request):
        raise NotSupported(EMBEDDINGS_OFF)
    model = served_model(request)
    pooling = _pooling(request)
    if oai and pooling == "none":
        raise InvalidRequest(POOLING_NONE_OAI)
    if pooling == "rank":
        raise NotSupported(RANK_EMBEDDINGS)
    body = json_object(request)
    if "input" in body:
        prompt = body["input"]
    elif "content" in body:
        prompt, oai = body["content"], False  # "content" is not an OpenAI field: the native shape answers
    else:
        raise InvalidRequest(NO_INPUT)
    use_base64 = _encoding_format(body)
    inputs = await offload.run(tokenize_prompts, model.loaded.tokenizer, {"prompt": prompt},
                               size=len(request.body or b""))
    if any(not tokens for tokens in inputs):
        raise InvalidRequest(EMPTY_INPUT)
    embd_normalize = _embd_normalize(body, int(serving(request).config.embd_normalize))
    results = await _counted(request, inputs, model.worker.embeddings(inputs, pooling, embd_normalize))
    # Per-token vectors (pooling none) of a long input make a large answer: encoded and sent off the loop.
    if not oai:
        return await send_json(request, [{"index": i, "embedding": r.vectors} for i, r in enumerate(results)])
    return await send_json(request, _oai_list(body, model.name, results, use_base64))


async def _counted(request: Request, inputs: list[list[int]], job: Any) -> Any:
    """The worker's embedding results; their prompts count in /metrics' prompt totals, as b10621's do."""
    started = time.perf_counter()
    results = await asyncio.wrap_future(job)
    metrics = serving(request).metrics
    if metrics is not None:
        metrics.follow(served_model(request).worker)
        metrics.on_prompt(sum(len(tokens) for tokens in inputs), time.perf_counter() - started)
    return results


def _encoding_format(body: dict[str, Any]) -> bool:
    """Whether ``encoding_format`` asks for base64 (``float``, the default, or ``base64``; anything else is 400)."""
    if "encoding_format" not in body:
        return False
    value = body["encoding_format"]
    if value == "base64":
        return True
    if value != "float":
        raise InvalidRequest(BAD_FORMAT)
    return False


def _embd_normalize(body: dict[str, Any], default: int) -> int:
    """The request's ``embd_normalize`` (an integer, as ``--embd-normalize``), else the server's."""
    if "embd_normalize" not in body:
        return default
    value = body["embd_normalize"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest("\"embd_normalize\" must be an integer")
    return value


def _oai_list(body: dict[str, Any], model_name: str, results: list[embed.EmbeddingResult],
              use_base64: bool) -> dict[str, Any]:
    """``format_embeddings_response_oaicompat``: the pooled vector of each input, with usage."""
    data = []
    for i, result in enumerate(results):
        vector = result.vectors[0]
        if use_base64:
            raw = struct.pack(f"<{len(vector)}f", *vector)
            data.append({"embedding": base64.b64encode(raw).decode("ascii"), "index": i, "object": "embedding",
                         "encoding_format": "base64"})
        else:
            data.append({"embedding": vector, "index": i, "object": "embedding"})
    return _listing(body, model_name, results, "data", data)


def _listing(body: dict[str, Any], model_name: str, results: list[embed.EmbeddingResult], key: str,
             items: list[Any]) -> dict[str, Any]:
    """The OpenAI-style list envelope both /v1/embeddings and the rerank routes answer with."""
    n_tokens = sum(r.n_tokens for r in results)
    requested = body.get("model")
    return {
        "model": requested if isinstance(requested, str) else model_name,
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        key: items,
    }


def _rerank_mode(request: Request) -> bool:
    """b10621's gate: the embedding mode with rank pooling set on the command line (not the model's default)."""
    config = serving(request).config
    reranking = bool(config.reranking)
    return reranking or (bool(config.embeddings) and config.pooling == "rank")


@bp.post("/rerank")
@bp.post("/reranking", name="reranking")
@bp.post("/v1/rerank", name="v1_rerank")
@bp.post("/v1/reranking", name="v1_reranking")
async def rerank(request: Request) -> HTTPResponse:
    """Jina's shape (``documents``), or TEI's (``texts``, a bare sorted list); scores from the reranker's head."""
    if not _rerank_mode(request):
        raise NotSupported(RERANKING_OFF)
    model = served_model(request)
    if not embed.is_qwen3_reranker(model.loaded.path):
        raise NotSupported(embed.rank_refusal(model.loaded.path, "reranking"))
    body = json_object(request)
    is_tei = "texts" in body
    if "query" not in body:
        raise InvalidRequest("\"query\" must be provided")
    query = body["query"]
    if not isinstance(query, str):
        raise InvalidRequest("\"query\" must be a string")
    documents = _strings(body.get("documents"))
    if documents is None:
        documents = _strings(body.get("texts")) or []
    if not documents:
        raise InvalidRequest("\"documents\" must be a non-empty string array")
    top_n = body.get("top_n", len(documents))
    if not isinstance(top_n, int) or isinstance(top_n, bool):
        top_n = len(documents)
    if top_n < 0:
        raise InvalidRequest("\"top_n\" must not be negative")
    tokenizer = model.loaded.tokenizer
    inputs = [encode(tokenizer, embed.rerank_prompt(query, doc), False) for doc in documents]
    rows = embed.rank_rows(tokenizer)
    results = await _counted(request, inputs, model.worker.embeddings(inputs, "rank", -1, rows))
    return json_response(_rerank_response(body, model.name, results, documents, top_n, is_tei))


def _strings(value: Any) -> list[str] | None:
    """``value`` when it is an array of strings (b10621's ``json_value`` falls back to the default otherwise)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _rerank_response(body: dict[str, Any], model_name: str, results: list[embed.EmbeddingResult],
                     documents: list[str], top_n: int, is_tei: bool) -> Any:
    """``format_response_rerank``: entries sorted by score, cut to ``top_n``; TEI's is the bare list."""
    label = "score" if is_tei else "relevance_score"
    return_text = is_tei and body.get("return_text") is True
    entries = []
    for i, result in enumerate(results):
        entry: dict[str, Any] = {"index": i, label: result.vectors[0][0]}
        if return_text:
            entry["text"] = documents[i]
        entries.append(entry)
    entries.sort(key=lambda e: e[label], reverse=True)
    entries = entries[:top_n]
    if is_tei:
        return entries
    return _listing(body, model_name, results, "results", entries)
