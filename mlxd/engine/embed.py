"""Embeddings from a causal LM's hidden states: the forward pass, pooling and normalisation as llama-server's.

The hidden states are the decoder's output after its final norm, before the output layer (mlx-lm models expose
that module as ``model.model``). Pooling and ``--embd-normalize`` follow b10621: ``none`` returns one vector per
input token and is never normalised; ``mean``/``cls``/``last`` return one vector per input, normalised. ``rank``
needs a classification head. mlx-lm loads none, but a Qwen3 reranker (a causal LM answering "yes" or "no") has one
inside its output layer: llama.cpp's converter makes the head from those two rows and scores with the softmax of
the last token's two logits. mlxd does the same from the loaded output layer; any other checkpoint is refused
before its weights are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import mlx.core as mx
import numpy as np

from mlxd.engine.loading import hub
from mlxd.errors import ContextOverflow, EngineError, InvalidRequest

POOLING_TYPES = ("none", "mean", "cls", "last", "rank")

# sentence-transformers' pooling config keys, in the order llama.cpp's converter reads them.
_SENTENCE_TRANSFORMERS_MODES = (
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_lasttoken", "last"),
)
_POOLING_MODE_NAMES = {"mean": "mean", "cls": "cls", "lasttoken": "last"}

# The prompt llama.cpp's converter stores as a Qwen3 reranker's "rerank" template.
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


@dataclass(frozen=True)
class EmbeddingResult:
    """One input's embedding: ``vectors`` is one row per token (pooling ``none``) or a single pooled row."""

    vectors: list[list[float]]
    n_tokens: int


@lru_cache(maxsize=64)  # read per request by the routes; a checkpoint does not change while served
def model_default_pooling(path: Path) -> str:
    """The checkpoint's own pooling: its sentence-transformers Pooling module when it has one, else ``none``.

    llama.cpp reads the same facts when it converts a checkpoint to GGUF (``pooling_type``) and falls back to
    ``none`` for a model without one, which is what a plain causal LM is.
    """
    if is_qwen3_reranker(path):
        return "rank"
    modules = _read_json(Path(path) / "modules.json")
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Pooling"):
            config = _read_json(Path(path) / str(module.get("path", "")) / "config.json")
            if isinstance(config, dict):
                for key, mode in _SENTENCE_TRANSFORMERS_MODES:
                    if config.get(key):
                        return mode
                return _POOLING_MODE_NAMES.get(str(config.get("pooling_mode")), "none")
    return "none"


@lru_cache(maxsize=64)
def is_qwen3_reranker(path: Path) -> bool:
    """Whether the checkpoint is a Qwen3 reranker, by the hints llama.cpp's converter reads: its README's title, or
    "qwen3-reranker" in its directory, repository, ``_name_or_path``, model type or architecture."""
    path = Path(path)
    config = _read_json(path / "config.json")
    if not isinstance(config, dict) or config.get("model_type") != "qwen3":
        return False
    readme = path / "README.md"
    try:
        title = readme.read_text(encoding="utf-8", errors="replace").lower() if readme.is_file() else ""
    except OSError:
        title = ""
    if "# qwen3-reranker" in title:
        return True
    hints = [path.name, hub.repo_of_snapshot(path) or "", str(config.get("_name_or_path", "")),
             *[str(a) for a in config.get("architectures") or []]]
    return any("qwen3-reranker" in hint.lower() for hint in hints)


def effective_pooling(pooling: str | None, reranking: bool, path: Path) -> str:
    """``--pooling`` as the server applies it: ``--reranking`` means ``rank``; unset means the model's default."""
    if reranking:
        return "rank"
    if pooling:
        return pooling
    return model_default_pooling(path)


def check_embedding_options(path: Path, *, embeddings: bool, reranking: bool, pooling: str | None) -> None:
    """Refuse, before the weights are read, an embedding mode this checkpoint cannot serve (``rank`` pooling)."""
    if not (embeddings or reranking):
        return
    if effective_pooling(pooling, reranking, path) == "rank" and not is_qwen3_reranker(path):
        raise EngineError(rank_refusal(path, "--reranking" if reranking else "--pooling rank"))


def rank_refusal(path: Path, what: str) -> str:
    """Why ``what`` (``--reranking`` / ``--pooling rank``) cannot be served with the checkpoint at ``path``."""
    config = _read_json(Path(path) / "config.json")
    arch = ", ".join(config.get("architectures") or []) if isinstance(config, dict) else ""
    return (
        f"{what} needs a model with a classification (rank) head, and mlx-lm loads none: {Path(path).name}"
        f"{f' ({arch})' if arch else ''} would only yield its hidden state, not a relevance score; "
        "serve a Qwen3 reranker (its yes/no output rows are the head), or use --embeddings with --pooling mean, "
        "cls or last"
    )


def rank_rows(tokenizer: Any) -> tuple[int, int]:
    """The output-layer rows a Qwen3 reranker scores with: the ids of its "yes" and "no" tokens."""
    ids = (tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no"))
    if not all(isinstance(i, int) and i >= 0 for i in ids):
        raise EngineError("this reranker's vocabulary has no \"yes\"/\"no\" tokens to score with")
    return ids[0], ids[1]


def rerank_prompt(query: str, document: str) -> str:
    """A query and a document in the reranker's template (``format_prompt_rerank``)."""
    return QWEN3_RERANK_TEMPLATE.replace("{query}", query).replace("{document}", document)


def text_model(model: Any) -> Any:
    """The module that maps token ids to the final hidden states (before the output layer)."""
    for owner in (model, getattr(model, "language_model", None)):
        inner = getattr(owner, "model", None) if owner is not None else None
        if inner is not None and callable(inner) and hasattr(inner, "layers"):
            return inner
    raise EngineError(
        f"{type(model).__module__}.{type(model).__name__} does not expose its decoder (model.model), "
        "so its hidden states cannot be read for embeddings"
    )


def check_inputs(inputs: Sequence[Sequence[int]], pooling: str, *, ubatch_size: int, n_ctx_slot: int,
                 vocab_size: int) -> None:
    """Raise what b10621 refuses per input: more tokens than one physical batch (``--ubatch-size``) or a slot's
    context when pooling needs the whole input at once, the slot's context otherwise; a token outside the
    vocabulary."""
    for tokens in inputs:
        n = len(tokens)
        if pooling == "last":  # b10621 may split a last-token input across batches
            if n >= n_ctx_slot:
                raise ContextOverflow(n, n_ctx_slot)
            continue
        if n > ubatch_size:
            raise EngineError(f"input ({n} tokens) is too large to process. increase the physical batch size "
                              f"(current batch size: {ubatch_size})")
        if n > n_ctx_slot:
            raise ContextOverflow(n, n_ctx_slot, f"input ({n} tokens) is larger than the max context size "
                                  f"({n_ctx_slot} tokens). skipping")
    bad = [t for tokens in inputs for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequest(f"invalid token id {bad[0]}: the vocabulary has {vocab_size} tokens")


def hidden_states(model: Any, inputs: Sequence[Sequence[int]]) -> list[mx.array]:
    """Each input's final hidden states, ``(n_tokens, n_embd)``, from one forward pass without a KV cache.

    The inputs are right-padded into one batch: with causal attention a real token never attends to the padding
    after it, so its hidden state is the one a forward pass of that input alone would give.
    """
    decoder = text_model(model)
    lengths = [len(tokens) for tokens in inputs]
    width = max(lengths)
    rows = [list(tokens) + [0] * (width - len(tokens)) for tokens in inputs]
    out = decoder(mx.array(rows, dtype=mx.int32)).astype(mx.float32)
    mx.eval(out)
    return [out[i, :n] for i, n in enumerate(lengths)]


def pool(hidden: np.ndarray, pooling: str) -> np.ndarray:
    """Pool ``(n_tokens, n_embd)`` hidden states: ``none`` keeps every row; the others give one row."""
    if pooling == "none":
        return hidden
    if pooling == "mean":
        return hidden.mean(axis=0, keepdims=True)
    if pooling == "cls":
        return hidden[:1]
    if pooling == "last":
        return hidden[-1:]
    raise EngineError(f"pooling {pooling!r} cannot be computed from hidden states alone")


def rank_scores(model: Any, last_hidden: mx.array, rows: tuple[int, int]) -> np.ndarray:
    """The classification head of a Qwen3 reranker: the softmax of the "yes" and "no" logits of each input's last
    hidden state, ``(n_inputs, 2)`` (llama.cpp's score is the first column)."""
    head = getattr(model, "lm_head", None)
    if head is None:
        head = text_model(model).embed_tokens.as_linear  # tied output layer
    logits = head(last_hidden)[:, list(rows)].astype(mx.float32)
    return np.array(mx.softmax(logits, axis=-1))


def normalize(vector: np.ndarray, embd_normalize: int) -> np.ndarray:
    """``--embd-normalize``: -1 none, 0 max-abs scaled to the int16 range, 1 taxicab, 2 euclidean, >2 p-norm."""
    x = vector.astype(np.float64)
    if embd_normalize == -1:
        total = 1.0
    elif embd_normalize == 0:
        total = float(np.max(np.abs(x), initial=0.0)) / 32760.0
    elif embd_normalize == 2:
        total = float(np.sqrt(np.sum(x * x)))
    else:
        with np.errstate(divide="ignore", over="ignore"):
            total = float(np.sum(np.abs(x) ** embd_normalize) ** (1.0 / embd_normalize))
    scale = 1.0 / total if total > 0.0 else 0.0
    return (x * scale).astype(np.float32)


def embed(model: Any, inputs: Sequence[Sequence[int]], pooling: str, embd_normalize: int,
          max_batch_tokens: int = 2048, rows: tuple[int, int] | None = None,
          on_pass: Callable[[int], None] | None = None) -> list[EmbeddingResult]:
    """Embeddings of every input (call on the thread that owns the model); with ``rank`` pooling each result is
    the head's output for the input (``rows`` names the reranker's yes/no rows), unnormalised, as b10621's.

    Inputs of similar length share a forward pass of at most ``max_batch_tokens`` padded tokens (at least one
    input), so a large request never builds one huge batch. ``on_pass(n_inputs)`` is told of each forward pass.
    """
    results: list[EmbeddingResult | None] = [None] * len(inputs)
    for chunk in _chunks(inputs, max_batch_tokens):
        hiddens = hidden_states(model, [inputs[i] for i in chunk])
        if on_pass is not None:
            on_pass(len(chunk))
        if pooling == "rank":
            if rows is None:
                raise EngineError("rank pooling needs the reranker's yes/no rows")
            scores = rank_scores(model, mx.stack([h[-1] for h in hiddens]), rows)
            for i, score in zip(chunk, scores):
                results[i] = EmbeddingResult(vectors=[score.tolist()], n_tokens=len(inputs[i]))
            continue
        for i, hidden in zip(chunk, hiddens):
            pooled = pool(np.array(hidden, dtype=np.float32), pooling)
            if pooling != "none":
                pooled = normalize(pooled[0], embd_normalize)[None, :]
            results[i] = EmbeddingResult(vectors=pooled.tolist(), n_tokens=len(inputs[i]))
    return [r for r in results if r is not None]


def _chunks(inputs: Sequence[Sequence[int]], max_batch_tokens: int) -> list[list[int]]:
    """Input indices grouped by length so that each group's padded size stays within ``max_batch_tokens``."""
    chunks: list[list[int]] = []
    for i in sorted(range(len(inputs)), key=lambda i: len(inputs[i])):
        if chunks and (len(chunks[-1]) + 1) * len(inputs[i]) <= max_batch_tokens:
            chunks[-1].append(i)  # sorted ascending: this input is the group's longest
        else:
            chunks.append([i])
    return chunks


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"model {path.parent}: cannot read {path.name}: {exc}") from exc
