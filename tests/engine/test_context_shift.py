"""--context-shift: later keys move to their new positions exactly, and generation runs past a full slot."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache

from mlxd.engine.batching import context_shift
from tests.engine.conftest import PROMPTS, final, greedy_request


def test_shifted_keys_equal_keys_computed_at_their_new_positions() -> None:
    rope = nn.RoPE(16, base=1e6)
    model = SimpleNamespace(layers=[SimpleNamespace(self_attn=SimpleNamespace(rope=rope))])
    raw = mx.random.normal((1, 2, 20, 16), key=mx.random.key(0))
    values = mx.random.normal((1, 2, 20, 16), key=mx.random.key(1))
    cache = KVCache()
    cache.update_and_fetch(rope(raw), values)
    keep, discard = 4, 6
    (out,) = context_shift.shift(model, [cache], keep, discard)
    kept_raw = mx.concatenate([raw[..., :keep, :], raw[..., keep + discard :, :]], axis=2)
    assert out.offset == 14
    assert mx.allclose(out.keys, rope(kept_raw), atol=1e-5)
    assert mx.array_equal(out.values[..., keep:, :], values[..., keep + discard :, :])


def test_plan_follows_upstream() -> None:
    assert context_shift.plan(47, 48, 0, 0, 10, False) == (0, 23)
    assert context_shift.plan(47, 48, -1, 0, 10, True) == (11, 18)
    assert context_shift.plan(47, 48, 100, 5, 10, False) == (44, 5)


def test_generation_continues_past_a_full_slot(tiny_model: Any, make_worker) -> None:
    tokens = list(tiny_model.tokenizer.encode(PROMPTS[0]))
    plain = final(make_worker(parallel=1, ctx_size=48).submit(greedy_request(tokens, n_predict=-1)))
    worker = make_worker(parallel=1, ctx_size=48, context_shift=True)
    shifted = final(worker.submit(greedy_request(tokens, n_predict=100, n_keep=4)))
    assert len(shifted.tokens) == 100 and shifted.truncated and shifted.stop_type == "limit"
    assert shifted.tokens[: len(plain.tokens)] == plain.tokens
    assert worker.scheduler.slots.slots[0].resident is None  # a shifted cache is no prefix of anything
