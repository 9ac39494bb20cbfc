"""Embeddings on the worker thread: hidden states, pooling and normalisation against numpy on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from mlxd.engine import embed
from mlxd.errors import ContextOverflow, EngineError
from tests.engine.conftest import final, greedy_request

INPUTS = [[5, 17, 42, 9, 100, 3], [7, 8], [250, 1, 2, 3]]


def _solo_hidden(model: Any, tokens: list[int]) -> np.ndarray:
    """The decoder's final hidden states for one input alone (mlx-lm's own module, no cache)."""
    return np.array(model.model(mx.array([tokens])).astype(mx.float32))[0]


def _l2(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("pooling,reference", [
    ("mean", lambda h: _l2(h.mean(axis=0))),
    ("cls", lambda h: _l2(h[0])),
    ("last", lambda h: _l2(h[-1])),
])
def test_pooled_embeddings_equal_numpy(make_worker: Any, tiny_model: Any, pooling: str, reference: Any) -> None:
    worker = make_worker(parallel=2)
    results = worker.embeddings(INPUTS, pooling, 2).result(timeout=60)
    assert [r.n_tokens for r in results] == [len(t) for t in INPUTS]
    for tokens, result in zip(INPUTS, results):
        assert len(result.vectors) == 1
        np.testing.assert_allclose(result.vectors[0], reference(_solo_hidden(tiny_model.model, tokens)),
                                   rtol=1e-4, atol=1e-5)


def test_pooling_none_gives_every_token_unnormalised(make_worker: Any, tiny_model: Any) -> None:
    worker = make_worker()
    results = worker.embeddings(INPUTS, "none", 2).result(timeout=60)
    for tokens, result in zip(INPUTS, results):
        np.testing.assert_allclose(np.array(result.vectors), _solo_hidden(tiny_model.model, tokens),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("embd_normalize,reference", [
    (-1, lambda v: v),
    (0, lambda v: v * 32760.0 / np.max(np.abs(v))),
    (1, lambda v: v / np.sum(np.abs(v))),
    (2, lambda v: v / np.linalg.norm(v)),
    (3, lambda v: v / np.sum(np.abs(v) ** 3) ** (1 / 3)),
])
def test_normalisation_variants(embd_normalize: int, reference: Any) -> None:
    v = np.array([3.0, -4.0, 0.5, 12.0, -0.25], dtype=np.float32)
    np.testing.assert_allclose(embed.normalize(v, embd_normalize), reference(v.astype(np.float64)), rtol=1e-6)
    assert not np.any(embed.normalize(np.zeros(4, dtype=np.float32), embd_normalize))


def test_request_normalisation_reaches_the_pooled_vector(make_worker: Any, tiny_model: Any) -> None:
    worker = make_worker()
    [raw] = worker.embeddings([INPUTS[0]], "mean", -1).result(timeout=60)
    [taxicab] = worker.embeddings([INPUTS[0]], "mean", 1).result(timeout=60)
    mean = _solo_hidden(tiny_model.model, INPUTS[0]).mean(axis=0)
    np.testing.assert_allclose(raw.vectors[0], mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(taxicab.vectors[0], mean / np.abs(mean).sum(), rtol=1e-4, atol=1e-6)


def test_limits_follow_b10621(make_worker: Any) -> None:
    worker = make_worker(parallel=1, ctx_size=64, ubatch_size=16)
    with pytest.raises(EngineError, match=r"input \(17 tokens\) is too large to process"):
        worker.embeddings([list(range(1, 18))], "mean", 2)
    small = make_worker(parallel=1, ctx_size=8, ubatch_size=512)
    with pytest.raises(ContextOverflow, match="larger than the max context size"):
        small.embeddings([list(range(1, 10))], "mean", 2)
    with pytest.raises(ContextOverflow):  # last-token pooling may span batches, but not the slot's context
        small.embeddings([list(range(1, 9))], "last", 2)


def test_embedding_between_generation_steps_leaves_the_generation_alone(
        make_worker: Any, tiny_model: Any, reference: Any) -> None:
    worker = make_worker(parallel=2)
    prompt = tiny_model.tokenizer.encode("The quick brown fox")
    handle = worker.submit(greedy_request(prompt, n_predict=12))
    futures = [worker.embeddings([t], "last", 2) for t in INPUTS]
    assert list(final(handle).tokens) == reference(prompt, 12)
    assert all(len(f.result(timeout=60)[0].vectors[0]) == tiny_model.config["hidden_size"] for f in futures)


def test_model_default_pooling_reads_the_sentence_transformers_module(tmp_path: Path, tiny_checkpoint: Path) -> None:
    assert embed.model_default_pooling(tiny_checkpoint) == "none"  # a causal LM: llama.cpp's default
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False, "pooling_mode_lasttoken": True}))
    assert embed.model_default_pooling(tmp_path) == "last"
    assert embed.effective_pooling(None, False, tmp_path) == "last"
    assert embed.effective_pooling("mean", False, tmp_path) == "mean"
    assert embed.effective_pooling("mean", True, tmp_path) == "rank"


def test_rank_pooling_is_refused_before_the_weights_are_read(tiny_checkpoint: Path) -> None:
    with pytest.raises(EngineError, match=r"--reranking needs a model with a classification \(rank\) head"):
        embed.check_embedding_options(tiny_checkpoint, embeddings=False, reranking=True, pooling=None)
    with pytest.raises(EngineError, match=r"--pooling rank needs"):
        embed.check_embedding_options(tiny_checkpoint, embeddings=True, reranking=False, pooling="rank")
    # Without the embedding mode the pooling type has no effect, so nothing is refused.
    embed.check_embedding_options(tiny_checkpoint, embeddings=False, reranking=False, pooling="rank")
    embed.check_embedding_options(tiny_checkpoint, embeddings=True, reranking=False, pooling="mean")


def test_small_batches_give_the_same_embeddings(tiny_model: Any) -> None:
    whole = embed.embed(tiny_model.model, INPUTS, "mean", 2)
    split = embed.embed(tiny_model.model, INPUTS, "mean", 2, max_batch_tokens=4)  # every input alone
    assert [r.n_tokens for r in split] == [len(t) for t in INPUTS]
    for a, b in zip(whole, split):
        np.testing.assert_allclose(a.vectors, b.vectors, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def reranker_checkpoint(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint under a Qwen3 reranker's name (llama.cpp's converter recognises it by the name too)."""
    return link_as_reranker(tiny_checkpoint, tmp_path_factory.mktemp("models") / "qwen3-reranker-tiny")


def link_as_reranker(checkpoint: Path, out: Path) -> Path:
    out.mkdir()
    for item in checkpoint.iterdir():
        (out / item.name).symlink_to(item)
    return out


def test_qwen3_reranker_is_recognised_as_the_converter_does(tmp_path: Path, tiny_checkpoint: Path,
                                                          reranker_checkpoint: Path) -> None:
    assert not embed.is_qwen3_reranker(tiny_checkpoint)
    assert embed.is_qwen3_reranker(reranker_checkpoint)
    assert embed.model_default_pooling(reranker_checkpoint) == "rank"
    by_readme = link_as_reranker(tiny_checkpoint, tmp_path / "plain")
    (by_readme / "README.md").write_text("---\nlicense: apache-2.0\n---\n# Qwen3-Reranker-0.6B\n")
    assert embed.is_qwen3_reranker(by_readme)
    embed.check_embedding_options(reranker_checkpoint, embeddings=False, reranking=True, pooling=None)


def test_rank_scores_are_the_softmax_of_the_yes_no_rows(tiny_model: Any) -> None:
    rows = embed.rank_rows(tiny_model.tokenizer)
    results = embed.embed(tiny_model.model, INPUTS, "rank", -1, rows=rows)
    weight = np.array(tiny_model.model.lm_head.weight.astype(mx.float32))[list(rows)]
    for tokens, result in zip(INPUTS, results):
        logits = weight @ _solo_hidden(tiny_model.model, tokens)[-1]
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        np.testing.assert_allclose(result.vectors, [expected], rtol=1e-4, atol=1e-6)
