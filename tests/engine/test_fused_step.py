"""The fused decode pass (engine.batching.fused) against the compiled model's own forward pass: the same logits within the
rounding of two operation orders (tests/numerics.py), and the same greedy token wherever the top two are further
apart than that, for every family and rope it takes, one token and several per row, one row and a left-padded
batch, across a capacity bucket; and the model's own pass for what it does not take."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import cache as mlx_cache
from mlx_lm.models import gemma, llama, qwen2, qwen3

from mlxd.engine.loading import kv_types
from mlxd.engine.batching.compiled import CompiledStep
from mlxd.engine.batching.fused import FusedDecoder
from tests.numerics import assert_close, assert_same_greedy

SHAPE = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             rms_norm_eps=1e-5, vocab_size=300)
# What each family's ModelArgs requires beyond the shape.
# The longest sum a logit goes through, per layer: the MLP's inner products, attention over up to 264 positions, and
# the residual stream across the layers; the bound is per term, so the whole depth counts.
REDUCTION = SHAPE["num_hidden_layers"] * (SHAPE["intermediate_size"] + 264 + SHAPE["hidden_size"])
# The results a bfloat16 model stores between its sums, per layer: the two norms, q/k/v, the scores, the attention
# output and its projection, the gate, up and down products and two residual additions; then the last norm and head.
STAGES = SHAPE["num_hidden_layers"] * 12 + 2


def same_logits(x: mx.array | None, y: mx.array | None, what: str = "") -> None:
    assert x is not None and y is not None
    assert_close(x, y, reduction=REDUCTION, stages=STAGES, what=what)
    assert_same_greedy(x, y, reduction=REDUCTION, stages=STAGES)


REQUIRED: dict[Any, dict[str, Any]] = {qwen3: dict(max_position_embeddings=4096, rope_theta=10000.0),
                                       gemma: dict(head_dim=16)}


def build(family: Any, dtype: mx.Dtype = mx.float32, quantize: bool = False, **args: Any) -> nn.Module:
    mx.random.seed(7)
    fields = {**SHAPE, **REQUIRED.get(family, {}), **args}
    model = family.Model(family.ModelArgs(model_type=family.__name__.rsplit(".", 1)[1], **fields))
    if quantize:
        nn.quantize(model, group_size=32, bits=4)
    elif dtype != mx.float32:
        model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


CASES = {
    "llama": lambda: build(llama, tie_word_embeddings=False),
    "llama-traditional-rope": lambda: build(llama, rope_traditional=True),
    "llama3-rope": lambda: build(llama, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 64}),
    "llama-linear-rope": lambda: build(llama, rope_scaling={"type": "linear", "factor": 2.0}),
    "qwen2-bias": lambda: build(qwen2),
    "qwen3-qk-norm": lambda: build(qwen3, head_dim=16, tie_word_embeddings=True),
    "qwen3-bfloat16": lambda: build(qwen3, mx.bfloat16, head_dim=16, tie_word_embeddings=True),
    "qwen3-4bit": lambda: build(qwen3, quantize=True, head_dim=16, tie_word_embeddings=False),
    # Head size 32: the smallest a q8_0 / q4_0 cache takes.
    "llama-traditional-rope-hd32": lambda: build(llama, rope_traditional=True, num_attention_heads=2,
                                                 num_key_value_heads=1),
    "qwen3-hd32": lambda: build(qwen3, head_dim=32, tie_word_embeddings=True),
}


def prefilled(model: nn.Module, prompt: list[int], kv: str | None = None) -> list[Any]:
    """The model's caches after ``prompt``: its own type, or ``kv`` (a -ctk type name) as the scheduler makes it."""
    cache = (mlx_cache.make_prompt_cache(model) if kv is None
             else kv_types.make_cache(model, kv_types.fit(kv_types.resolve(kv, kv, explicit=True), model)))
    model(mx.array([prompt]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def twin_steps(model: nn.Module) -> tuple[CompiledStep, CompiledStep]:
    fused, own = CompiledStep(model), CompiledStep(model)
    own.fused = None
    assert fused.fused is not None
    return fused, own


@pytest.mark.parametrize("case", [c for c in CASES if not c.endswith("hd32")])
def test_one_row_decodes_the_same_logits_across_a_bucket(case: str) -> None:
    model = CASES[case]()
    fused, own = twin_steps(model)
    a, b = prefilled(model, [1, 5, 9, 13]), prefilled(model, [1, 5, 9, 13])
    token = mx.array([3], mx.uint32)
    for i in range(260):  # from 4 positions past the first 256-entry bucket
        x, y = fused(token, a), own(token, b)
        same_logits(x, y, f"step {i}")
        assert x is not None
        token = mx.argmax(x, axis=-1).astype(mx.uint32)
    for n in (2, 5):  # a speculative verification: several tokens, every position's logits
        tokens = mx.array([[7, 11, 2, 5, 8][:n]], mx.uint32)
        same_logits(fused.forward(tokens, a), own.forward(tokens, b), f"{n} tokens")
    assert fused.steps == own.steps == 262


@pytest.mark.parametrize("case, kv", [("llama-traditional-rope-hd32", "q8_0"), ("qwen3-hd32", "q4_0"),
                                      ("qwen3-bfloat16", "f16")])
def test_a_typed_or_quantized_cache_decodes_the_same_logits(case: str, kv: str) -> None:
    """-ctk types: a quantized cache goes through mlx-lm's quantized attention, which scales the queries itself."""
    model = CASES[case]()
    fused, own = twin_steps(model)
    a, b = prefilled(model, [1, 5, 9, 13], kv), prefilled(model, [1, 5, 9, 13], kv)
    assert type(a[0]).__name__ == ("TypedKV" if kv == "f16" else "QuantKV")
    token = mx.array([3], mx.uint32)
    for i in range(40):
        x, y = fused(token, a), own(token, b)
        same_logits(x, y, f"step {i}")
        assert x is not None
        token = mx.argmax(x, axis=-1).astype(mx.uint32)
    tokens = mx.array([[7, 11, 2]], mx.uint32)
    same_logits(fused.forward(tokens, a), own.forward(tokens, b), "3 tokens")


@pytest.mark.parametrize("case, kv", [("llama", None), ("qwen3-qk-norm", None), ("qwen3-4bit", None),
                                      ("qwen3-hd32", "q8_0")])
def test_a_left_padded_batch_decodes_the_same_logits(case: str, kv: str | None) -> None:
    model = CASES[case]()
    fused, own = twin_steps(model)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11] * 20]

    def batch() -> list[Any]:
        rows = [prefilled(model, p, kv) for p in prompts]
        return [rows[0][i].merge([r[i] for r in rows]) for i in range(len(rows[0]))]

    a, b = batch(), batch()
    tokens = mx.array([5, 6, 7], mx.uint32)
    for _ in range(40):
        x, y = fused(tokens, a), own(tokens, b)
        same_logits(x, y)
        assert x is not None
        tokens = mx.argmax(x, axis=-1).astype(mx.uint32)
    for n in (2, 4):
        block = mx.array([[3, 7, 11, 2][:n]] * 3, mx.uint32)
        same_logits(fused.forward(block, a), own.forward(block, b), f"{n} tokens")


def test_the_fused_step_has_fewer_graph_operations(tmp_path: Any) -> None:
    """The point of the pass: a one-token step of the same model in far fewer graph nodes."""
    model = CASES["llama"]()
    counts = []
    for step in twin_steps(model):
        cache = prefilled(model, [1, 2, 3])
        logits = step(mx.array([4], mx.uint32), cache)
        assert logits is not None
        path = tmp_path / "step.dot"
        mx.export_to_dot(str(path), logits, *[a for c in cache for a in (c.keys, c.values)])
        counts.append(path.read_text().count("shape=rectangle"))
    fused_nodes, own_nodes = counts
    assert fused_nodes < 0.6 * own_nodes, counts


@pytest.mark.parametrize("make, why", [
    (lambda: build(llama, sliding_window=8, layer_types=["sliding_attention", "full_attention"]), "sliding"),
    (lambda: build(llama, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
     "rope"),
    (lambda: build(gemma), None),
])
def test_other_models_keep_their_own_forward_pass(make: Any, why: str | None,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    model = make()
    with caplog.at_level("INFO", logger="mlxd.engine.batching.fused"):
        assert FusedDecoder.of(model) is None
    if why is not None:
        assert why in caplog.text
    step = CompiledStep(model)  # still compiled where engine.batching.compiled applies, through the model's own pass
    assert step.fused is None
    if why != "sliding":  # a sliding-window cache decodes uncompiled
        assert step(mx.array([3], mx.uint32), prefilled(model, [1, 2])) is not None


def test_a_failing_fused_pass_falls_back_to_the_models_own(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    model = CASES["llama"]()
    step, own = twin_steps(model)

    def broken(*args: Any) -> mx.array:
        raise ValueError("no")

    monkeypatch.setattr(step.fused, "__call__", broken)
    monkeypatch.setattr(FusedDecoder, "__call__", lambda self, *a: broken())
    a, b = prefilled(model, [1, 2, 3]), prefilled(model, [1, 2, 3])
    with caplog.at_level("WARNING", logger="mlxd.engine.batching.compiled"):
        x = step(mx.array([4], mx.uint32), a)
    assert step.fused is None and "fused decode step failed" in caplog.text
    assert x is not None and mx.array_equal(x, own(mx.array([4], mx.uint32), b)).item()
