"""KV cache types (-ctk / -ctv): MLX's quantized cache in the decode batch, the prompt cache and slot files, the
float dtypes, and b10621's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlxd.config import ConfigError, resolve
from mlxd.engine.loading import kv_types
from mlxd.engine.loading.loader import load_model
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.worker import ModelWorker
from mlxd.errors import EngineError
from tests.conftest import synthetic_checkpoint
from tests.engine.conftest import PROMPTS, final, greedy_request

# q8_0 against the checkpoint's own dtype, teacher-forced over the same tokens: every position's logits stay
# within this share of that position's logit range. 8-bit affine quantization in groups of 32 rounds each key and
# value by at most half a step, 1/510 of its group's range; attention and the layers above average these errors,
# so the logits move by far less (about 0.03 % on this checkpoint). 0.5 % leaves room for other weights while
# still failing a cache that mixes up rows, positions or scales (those move logits by tens of percent).
Q8_LOGIT_TOLERANCE = 0.005
# Greedy decoding is discontinuous: a near-tie between two tokens can flip on any perturbation, after which the
# continuations differ. The random-weight checkpoint has such near-ties past ~30 tokens, so the greedy check
# holds the first 16 generated tokens of each prompt to equality.
Q8_GREEDY_PREFIX = 16


@pytest.fixture(scope="module")
def hd32() -> Any:
    """tiny with a head size of 32, the smallest that b10621's block of 32 divides."""
    return load_model(synthetic_checkpoint("tiny-hd32"))


def _teacher_forced(model: Any, kv: kv_types.KvType, tokens: list[int]) -> mx.array:
    cache = kv_types.make_cache(model, kv)
    return mx.stack([model(mx.array([[t]]), cache=cache)[0, -1] for t in tokens])


def test_q8_0_logits_stay_within_the_stated_tolerance_of_the_checkpoint_dtype(hd32: Any) -> None:
    tokens = list(hd32.tokenizer.encode(" ".join(PROMPTS)))[:64]
    ref = _teacher_forced(hd32.model, kv_types.CHECKPOINT, tokens)
    q8 = _teacher_forced(hd32.model, kv_types.fit(kv_types.resolve("q8_0", "q8_0", True), hd32.model), tokens)
    span = ref.max(axis=-1) - ref.min(axis=-1)
    assert float((mx.abs(q8 - ref).max(axis=-1) / span).max()) <= Q8_LOGIT_TOLERANCE
    assert mx.array_equal(mx.argmax(q8, -1), mx.argmax(ref, -1))


def _run(model: Any, prompts: list[str], n: int, **settings: Any) -> tuple[list[list[int]], ModelWorker]:
    worker = ModelWorker(model, WorkerSettings(ctx_size=2048, parallel=len(prompts), **settings))
    worker.start()
    handles = [worker.submit(greedy_request(list(model.tokenizer.encode(p)), n)) for p in prompts]
    return [final(h).tokens for h in handles], worker


def test_q8_0_batched_greedy_output_matches_the_checkpoint_dtype_and_memory_shrinks(hd32: Any) -> None:
    """Four prompts decode together (rows merge, extend and filter the batched quantized cache)."""
    ref, w0 = _run(hd32, PROMPTS, 24)
    q8, w1 = _run(hd32, PROMPTS, 24, cache_type_k="q8_0", cache_type_v="q8_0")
    try:
        for a, b in zip(ref, q8):
            assert a[:Q8_GREEDY_PREFIX] == b[:Q8_GREEDY_PREFIX]
        full, quant = w0.kv_cache_info(), w1.kv_cache_info()
        assert (full["type_k"], quant["type_k"], quant["quantized"]) == ("float32", "q8_0", True)
        # float32 keys at 4 bytes, q8_0 at 1 byte plus a float32 scale and bias per group of 32.
        assert quant["bytes_per_token"] * 4 == full["bytes_per_token"] * (1 + 8 / 32)
        assert quant["bytes_per_slot"] == quant["bytes_per_token"] * w1.n_ctx_slot
    finally:
        w0.stop(0.0)
        w1.stop(0.0)


def test_a_quantized_cache_is_reused_by_the_prompt_cache_and_survives_a_slot_file(hd32: Any, tmp_path: Path) -> None:
    prompt = list(hd32.tokenizer.encode(PROMPTS[0] * 3))
    worker = ModelWorker(hd32, WorkerSettings(ctx_size=2048, parallel=1, cache_type_k="q4_0", cache_type_v="q4_0"))
    worker.start()
    try:
        cold = final(worker.submit(greedy_request(prompt, 12)))
        warm = final(worker.submit(greedy_request(prompt, 12)))
        assert warm.tokens == cold.tokens and warm.timings.cache_n > 0
        saved = worker.save_slot(0, tmp_path / "s.bin")
        assert saved > len(prompt)  # the prompt and what was generated
        worker.erase_slot(0)
        assert worker.restore_slot(0, tmp_path / "s.bin") == saved
        restored = final(worker.submit(greedy_request(prompt, 12)))
        assert restored.tokens == cold.tokens and restored.timings.cache_n == len(prompt) - 1
    finally:
        worker.stop(0.0)
    other = ModelWorker(hd32, WorkerSettings(ctx_size=2048, parallel=1))  # an f32 cache refuses the q4_0 file
    other.start()
    try:
        with pytest.raises(Exception, match="Unable to restore slot"):
            other.restore_slot(0, tmp_path / "s.bin")
    finally:
        other.stop(0.0)


def test_an_explicit_float_type_stores_that_dtype(hd32: Any) -> None:
    ref, w0 = _run(hd32, PROMPTS[:2], 8)
    f16, w1 = _run(hd32, PROMPTS[:2], 8, cache_type_k="f16", cache_type_v="f16")
    w0.stop(0.0)
    w1.stop(0.0)
    assert w1.kv_cache_info()["bytes_per_token"] * 2 == w0.kv_cache_info()["bytes_per_token"]
    assert f16 == ref  # half precision keys move this checkpoint's logits by ~1e-5 of their range
    cache = kv_types.make_cache(hd32.model, kv_types.resolve("bf16", "bf16", True))
    hd32.model(mx.array([[1, 2, 3]]), cache=cache)
    assert cache[0].keys.dtype == mx.bfloat16


def test_refusals_name_the_block_size_the_head_size_and_the_types(tiny_model: Any) -> None:
    # tiny's head size is 16, as in b10621's own refusal of q8_0 on such a model.
    with pytest.raises(EngineError, match="K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"):
        ModelWorker(tiny_model, WorkerSettings(ctx_size=512, cache_type_k="q8_0", cache_type_v="q8_0"))
    with pytest.raises(EngineError, match="q8_0 and --cache-type-v f16 differ"):
        ModelWorker(tiny_model, WorkerSettings(ctx_size=512, cache_type_k="q8_0"))
    with pytest.raises(ConfigError) as info:
        resolve(["-m", "x", "-ctk", "iq4_nl"], {}, read_config_ini=False)
    assert "not supported by mlxd: iq4_nl is a non-linear 4-bit codebook" in info.value.problems[0].message
    with pytest.raises(ConfigError) as info:
        resolve(["-m", "x", "-ctv", "q7_0"], {}, read_config_ini=False)
    assert "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1" in info.value.problems[0].message


def test_the_kv_cache_report_says_whether_its_type_was_set(hd32: Any) -> None:
    """/props shows ``kv_cache`` only for an explicit type (b10621's /props has no such key to keep parity with)."""
    _, w0 = _run(hd32, PROMPTS[:1], 1)
    _, w1 = _run(hd32, PROMPTS[:1], 1, cache_type_k="q8_0", cache_type_v="q8_0")
    w0.stop(0.0)
    w1.stop(0.0)
    assert not w0.kv_cache_info()["explicit"] and w1.kv_cache_info()["explicit"]
    assert w1.kv_cache_info()["group_size"] == 32


@pytest.mark.parametrize("kind", ["q8_0", "f16"])
def test_a_typed_cache_decodes_compiled_with_the_uncompiled_tokens(hd32: Any, kind: str) -> None:
    """-ctk types decode through the compiled step (its quantized stand-ins write and attend as mlx-lm's
    QuantizedKVCache does), with the tokens of the uncompiled forward pass, rows joining and leaving."""
    runs = []
    for compiled in (True, False):
        worker = ModelWorker(hd32, WorkerSettings(ctx_size=2048, parallel=4, cache_type_k=kind, cache_type_v=kind))
        if not compiled:
            worker.scheduler.compiled = None
        worker.start()
        try:
            handles = [worker.submit(greedy_request(list(hd32.tokenizer.encode(p * (1 + i))), 20 + 7 * i))
                       for i, p in enumerate(PROMPTS)]
            runs.append([final(h).tokens for h in handles])
            if compiled:
                assert worker.scheduler.compiled is not None and worker.scheduler.compiled.steps > 0
        finally:
            worker.stop(0.0)
    assert runs[0] == runs[1]
