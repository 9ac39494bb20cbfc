"""Prompts that arrive together with parts already cached are processed in one pass and equal their cold runs."""

from __future__ import annotations

from tests.engine.conftest import PROMPTS, final, greedy_request


def test_cached_prefixes_of_different_lengths_prefill_together(tiny_model, make_worker) -> None:
    encode = tiny_model.tokenizer.encode
    shared = list(encode(PROMPTS[0] * 3))
    # Cached prefixes of different lengths (the whole shared part, or part of it), then suffixes of their own.
    prompts = [shared + list(encode(p)) for p in PROMPTS] + [shared[:7] + list(encode(PROMPTS[2] * 2)),
                                                           list(encode(PROMPTS[3] * 2))]
    cold_worker = make_worker(parallel=1, cache_ram=0)
    cold = [final(cold_worker.submit(greedy_request(p, 12, cache_prompt=False))) for p in prompts]

    worker = make_worker(parallel=len(prompts))
    final(worker.submit(greedy_request(shared + list(encode(" x")), 2)))  # leaves the shared prefix cached
    handles = [worker.submit(greedy_request(p, 12)) for p in prompts]
    warm = [final(h) for h in handles]

    assert [w.tokens for w in warm] == [c.tokens for c in cold]
    assert [w.text for w in warm] == [c.text for c in cold]
    assert sum(w.timings.cache_n > 0 for w in warm) >= 4
    assert [w.timings.prompt_n + w.timings.cache_n for w in warm] == [len(p) for p in prompts]
