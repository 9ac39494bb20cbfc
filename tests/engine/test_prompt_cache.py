"""Prompt reuse: a slot's own tokens and the host cache (--cache-ram), by namespace, with exact results."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxd.engine.batching.prompt_cache.ram import PromptCache
from tests.engine.conftest import PROMPTS, final, greedy_request


def long_prompt(tiny_model: Any, i: int = 0) -> list[int]:
    return list(tiny_model.tokenizer.encode((PROMPTS[i] + " ") * 12))


def test_cache_hit_equals_cold_run(tiny_model, make_worker) -> None:
    cold_worker = make_worker(parallel=1)
    prompt = long_prompt(tiny_model)
    extended = prompt + list(tiny_model.tokenizer.encode(PROMPTS[1]))
    cold = [final(cold_worker.submit(greedy_request(p, 20, cache_prompt=False))) for p in (prompt, extended)]
    assert [c.timings.cache_n for c in cold] == [0, 0]

    worker = make_worker(parallel=2)
    first = final(worker.submit(greedy_request(prompt, 20)))
    again = final(worker.submit(greedy_request(prompt, 20)))
    longer = final(worker.submit(greedy_request(extended, 20)))
    assert first.tokens == again.tokens == cold[0].tokens
    assert longer.tokens == cold[1].tokens
    assert first.timings.cache_n == 0
    assert again.timings.cache_n == len(prompt) - 1 and again.timings.prompt_n == 1
    assert longer.timings.cache_n >= len(prompt)
    assert longer.timings.cache_n + longer.timings.prompt_n == len(extended)
    for slot in worker.scheduler.slots.slots:  # what a slot keeps is exactly what its tokens say
        if slot.resident is not None:
            assert all(c.offset == len(slot.resident.tokens) for c in slot.resident.kv)


def test_namespaces_and_per_request_opt_out(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    prompt = long_prompt(tiny_model, 2)
    final(worker.submit(greedy_request(prompt, 4)))
    assert final(worker.submit(greedy_request(prompt, 4, cache_namespace="chat"))).timings.cache_n == 0
    assert final(worker.submit(greedy_request(prompt, 4, cache_prompt=False))).timings.cache_n == 0
    assert final(worker.submit(greedy_request(prompt, 4))).timings.cache_n == len(prompt) - 1


def test_host_cache_keeps_prompts_a_slot_gave_up(tiny_model, make_worker) -> None:
    a, b = long_prompt(tiny_model, 0), long_prompt(tiny_model, 3)
    for budget, reused in ((-1, True), (0, False)):
        worker = make_worker(parallel=1, cache_ram=budget)
        final(worker.submit(greedy_request(a, 4)))
        final(worker.submit(greedy_request(b, 4)))  # the only slot now holds b
        hit = final(worker.submit(greedy_request(a, 4))).timings.cache_n
        assert (hit == len(a) - 1) is reused, budget


def _entry(n_tokens: int) -> list[KVCache]:
    cache = KVCache()
    cache.update_and_fetch(mx.zeros((1, 2, n_tokens, 8)), mx.zeros((1, 2, n_tokens, 8)))
    return [cache]


def test_lru_eviction_under_the_byte_budget() -> None:
    entry_bytes = _entry(16)[0].nbytes
    cache = PromptCache(max_bytes=entry_bytes * 2)
    cache.insert("raw", list(range(16)), _entry(16))
    cache.insert("raw", list(range(100, 116)), _entry(16))
    cache.insert("raw", list(range(200, 216)), _entry(16))  # over budget: the oldest goes
    assert cache.fetch("raw", list(range(16)))[1] == 0
    kv, n = cache.fetch("raw", list(range(100, 116)) + [7])
    assert n == 16 and kv is not None and kv[0].offset == 16
    assert cache.fetch("chat", list(range(100, 116)) + [7]) == (None, 0)


def test_a_fetch_always_leaves_a_token_and_never_touches_the_entry() -> None:
    cache = PromptCache(max_bytes=None)
    cache.insert("raw", list(range(10)), _entry(10))
    kv, n = cache.fetch("raw", list(range(10)))
    assert n == 9 and kv is not None and kv[0].offset == 9
    kv[0].update_and_fetch(mx.ones((1, 2, 1, 8)), mx.ones((1, 2, 1, 8)))
    again, n = cache.fetch("raw", list(range(10)))
    assert n == 9 and again is not None and float(again[0].keys[..., :10, :].sum()) == 0.0
    assert PromptCache(max_bytes=0).fetch("raw", list(range(10))) == (None, 0)
