"""The compiled, pipelined decode step against the uncompiled one and against the sampling chain's unpipelined
greedy path: the same tokens over a concurrent batch, and no token gained or lost by the look-ahead step at a
stop string, at ``n_predict`` or at a cancellation."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxd.engine.batching import compiled as compiled_module
from mlxd.engine.batching.compiled import SHORT_PROMPT, CompiledStep
from mlxd.engine.batching.step_caches import capacity_for
from mlxd.engine.batching.handle import RequestHandle
from mlxd.engine.batching.scheduler import Scheduler
from mlxd.engine.types import ErrorEvent, FinalEvent, TokenEvent
from tests.engine.conftest import PROMPTS, final, greedy_request
from tests.engine.test_scheduler import make_scheduler, run_until  # noqa: F401  (the fixture)

# Prompt lengths and budgets chosen so that rows join and leave at different steps and one row's context crosses
# a 256-entry bucket of the KV buffers (a new compiled shape) while others decode beside it.
LENGTHS = [40, 7, 25, 300]


def prompts_of(tiny_model: Any) -> list[list[int]]:
    out = []
    for i, text in enumerate(PROMPTS):
        ids = list(tiny_model.tokenizer.encode(text * (1 + 4 * i)))
        out.append((ids * (1 + 240 // len(ids)))[:250] if i == 3 else ids)
    return out


def events(handle: RequestHandle) -> list[Any]:
    """Every event the request got, up to its terminal one (the scheduler has pushed them all by now)."""
    return list(handle)


def run_batch(sched: Scheduler, prompts: list[list[int]], unpipelined: bool = False, n_predict: int | None = None,
              **fields: Any) -> list[RequestHandle]:
    """All prompts at once (rows join as their prompts end), each generating ``n_predict`` tokens or its LENGTHS;
    ``unpipelined``: each row asks for its probabilities, which sends it through the sampling chain's greedy path,
    one read-back per step and no look-ahead."""
    if unpipelined:
        fields["n_probs"] = 1
    lengths = LENGTHS if n_predict is None else [n_predict] * len(prompts)
    handles = [RequestHandle(greedy_request(p, n, **fields), i + 1, lambda h: None)
               for i, (p, n) in enumerate(zip(prompts, lengths))]
    for h in handles:
        sched.add(h)
    run_until(sched, lambda: sched.idle)
    return handles


def test_compiled_pipelined_batch_equals_uncompiled_and_unpipelined(tiny_model, make_scheduler) -> None:
    prompts = prompts_of(tiny_model)
    compiled = make_scheduler(parallel=4, cache_ram=0, batch_size=64)
    together = [final(h).tokens for h in run_batch(compiled, prompts)]
    assert compiled.compiled is not None and compiled.compiled.enabled and compiled.compiled.steps > 0
    plain = make_scheduler(parallel=4, cache_ram=0, batch_size=64)
    plain.compiled = None
    assert [final(h).tokens for h in run_batch(plain, prompts)] == together
    chain = make_scheduler(parallel=4, cache_ram=0, batch_size=64)
    chain.compiled = None
    assert [final(h).tokens for h in run_batch(chain, prompts, unpipelined=True)] == together
    assert [len(t) for t in together[:3]] == LENGTHS[:3] and len(prompts[3]) + len(together[3]) > 256


def test_the_look_ahead_step_neither_leaks_nor_loses_a_token(tiny_model, make_scheduler) -> None:
    prompts = prompts_of(tiny_model)
    free = make_scheduler(parallel=4, cache_ram=0)
    texts = [final(h).text for h in run_batch(free, prompts)]
    stops = [t[len(t) // 2 : len(t) // 2 + 3] for t in texts]  # a stop string in the middle of each text
    for unpipelined in (False, True):
        sched = make_scheduler(parallel=4, cache_ram=0)
        handles = [RequestHandle(greedy_request(p, n, stop=[s], n_probs=1 if unpipelined else 0), i + 1,
                                 lambda h: None) for i, (p, n, s) in enumerate(zip(prompts, LENGTHS, stops))]
        for h in handles:
            sched.add(h)
        run_until(sched, lambda: sched.idle)
        got = []
        for h, text, stop in zip(handles, texts, stops):
            evs = events(h)
            done = evs[-1]
            assert isinstance(done, FinalEvent) and done.stop_type == "word" and done.stopping_word == stop
            tokens = [e.token_id for e in evs if isinstance(e, TokenEvent)]
            assert tuple(tokens) == done.tokens  # one event per token, nothing after the final one
            assert done.text == text[: text.index(stop)] == "".join(e.text for e in evs if isinstance(e, TokenEvent))
            got.append(done.tokens)
        if unpipelined:
            assert got == reference
        reference = got


def test_n_predict_and_cancel_with_the_look_ahead_step(tiny_model, make_scheduler) -> None:
    prompts = prompts_of(tiny_model)
    solo = make_scheduler(parallel=1, cache_ram=0)
    alone = [final(h).tokens for h in run_batch(solo, prompts[:1])]
    sched = make_scheduler(parallel=3, cache_ram=0)
    keep = RequestHandle(greedy_request(prompts[0], LENGTHS[0]), 1, lambda h: None)
    gone = RequestHandle(greedy_request(prompts[1], 200), 2, lambda h: None)
    sched.add(keep)
    sched.add(gone)
    run_until(sched, lambda: len(sched.batch) == 2)
    for _ in range(5):
        sched.step()
    sched.cancel(gone)
    seen = events(gone)
    assert isinstance(seen[-1], ErrorEvent)
    n_before = len(seen)
    run_until(sched, lambda: sched.idle)
    assert gone._events.empty() and n_before == len(seen)  # nothing reached the cancelled request afterwards
    evs = events(keep)
    assert [e.token_id for e in evs if isinstance(e, TokenEvent)] == list(alone[0]) == list(evs[-1].tokens)
    assert len(alone[0]) == LENGTHS[0]  # n_predict: exactly that many tokens, the look-ahead one dropped
    assert all(not s.is_processing for s in sched.slots.slots)
    again = RequestHandle(greedy_request(prompts[0], LENGTHS[0]), 3, lambda h: None)
    sched.add(again)
    run_until(sched, lambda: sched.idle)
    assert final(again).tokens == alone[0]  # the freed slot serves the next request as before


def test_two_workers_decoding_at_once_keep_their_tokens(tiny_model, make_worker) -> None:
    """Two workers of one process (a pool, or a swap whose new model loads before the old drains) trace and replay
    their compiled steps at the same time; each request still gets its solo tokens."""
    prompts = prompts_of(tiny_model)[:3]
    solo = make_worker(parallel=1, cache_ram=0)
    alone = [final(solo.submit(greedy_request(p, 48))).tokens for p in prompts]
    first, second = make_worker(parallel=3, cache_ram=0), make_worker(parallel=3, cache_ram=0)
    handles = [w.submit(greedy_request(p, 48)) for p in prompts for w in (first, second)]
    assert [final(h).tokens for h in handles] == [t for t in alone for _ in range(2)]
    assert first.scheduler.compiled.steps > 0 and second.scheduler.compiled.steps > 0


def test_kv_capacity_doubles_to_64_grows_by_32_to_256_then_by_256() -> None:
    assert [capacity_for(n) for n in (1, 32, 33, 64, 65, 96, 97, 200, 256, 257, 700)] == [
        32, 32, 64, 64, 96, 96, 128, 224, 256, 512, 768]


def test_a_cache_the_compiled_step_cut_back_serves_the_slots_next_request(tiny_model, make_scheduler) -> None:
    """Prompt processing leaves mlx-lm's 256-entry buffers; a short context decodes compiled on a smaller bucket
    (a view of them). The slot keeps that cache, and its next request, which extends the first's text, is
    prefilled on it uncompiled: the tokens are those of a scheduler that never compiled."""
    prompt = prompts_of(tiny_model)[1]
    runs = []
    for compiled in (True, False):
        sched = make_scheduler(parallel=1)
        if not compiled:
            sched.compiled = None
        first = final(run_batch(sched, [prompt])[0])
        follow = RequestHandle(greedy_request(prompt + list(first.tokens) + prompt, 40), 9, lambda h: None)
        sched.add(follow)
        run_until(sched, lambda: sched.idle)
        runs.append((first.tokens, final(follow).tokens))
        if compiled:
            assert sched.compiled is not None and sched.compiled.steps > 0
            resident = sched.slots.slots[0].resident
            assert resident is not None and resident.kv[0].keys.shape[2] == capacity_for(len(resident.tokens))
    assert runs[0] == runs[1]


def test_a_prompts_last_token_goes_through_the_decode_steps_trace(tiny_model, make_scheduler,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt's final position is a one-token pass like a decode step's, so it runs compiled: one prompt on its
    own caches, and a group of prompts processed together on a batched one; the first tokens are the uncompiled
    pass's. (Short runs of prompt tokens before it are compiled too: not here, to count the last tokens alone.)"""
    monkeypatch.setattr(compiled_module, "SHORT_PROMPT", 0)
    prompts = prompts_of(tiny_model)[:3]
    firsts = {}
    for compiled in (True, False):
        for group in (False, True):
            sched = make_scheduler(parallel=3, cache_ram=0, batch_size=512 if group else 8)
            if not compiled:
                sched.compiled = None
            firsts[compiled, group] = [final(h).tokens for h in run_batch(sched, prompts, n_predict=1)]
            if compiled:  # n_predict 1: no decode step, only the prompts' last positions
                assert sched.compiled is not None and sched.compiled.steps == (1 if group else 3)
    assert firsts[True, False] == firsts[False, False] == firsts[True, True] == firsts[False, True]
    assert all(len(t) == 1 for t in firsts[True, False])


@pytest.mark.parametrize("n", [2, 5, 13, SHORT_PROMPT - 1])
def test_a_short_prompt_runs_compiled_into_the_same_cache(tiny_model, n: int) -> None:
    """A short run of prompt tokens goes through the compiled pass once the steps have shown the caches' layout,
    right-padded to a multiple of 4: the keys and values at its positions are the model's own pass's up to float32
    rounding (more rows in each product, the whole buffer attended), and the caches stop at its last token."""
    model = tiny_model.model
    step = CompiledStep(model)
    tokens = [(7 * i + 3) % 200 + 10 for i in range(n)]
    assert not step.prompt(tokens, make_prompt_cache(model))  # no layout seen yet: the caller runs it uncompiled
    seen = make_prompt_cache(model)
    model(mx.array([[1, 2, 3]]), cache=seen)
    assert step(mx.array([4], mx.uint32), seen) is not None  # a decode step: the layout is learnt
    compiled, own = make_prompt_cache(model), make_prompt_cache(model)
    assert step.prompt(tokens, compiled)
    model(mx.array([tokens]), cache=own)
    for a, b in zip(compiled, own):
        assert a.offset == b.offset == n
        assert mx.allclose(a.keys[..., :n, :], b.keys[..., :n, :], atol=1e-5).item()
        assert mx.allclose(a.values[..., :n, :], b.values[..., :n, :], atol=1e-5).item()
    nxt = mx.array([5], mx.uint32)  # and the next step reads the same cache, the padding's entries masked
    logits = step(nxt, compiled)
    assert logits is not None and mx.allclose(logits, model(nxt[:, None], cache=own)[:, -1, :], atol=1e-4).item()
    assert not step.prompt(list(range(10, 11 + SHORT_PROMPT)), make_prompt_cache(model))  # too long: uncompiled


def test_short_prompts_give_the_tokens_of_uncompiled_prompts(tiny_model, make_scheduler) -> None:
    """Through the scheduler: prompts whose runs are short (a chunk of -b 16, a head after it) decode the same
    greedy tokens with and without the compiled pass, and the compiled pass did take them."""
    prompts = [p[:40] for p in prompts_of(tiny_model)]
    tokens = {}
    for compiled in (True, False):
        sched = make_scheduler(parallel=2, cache_ram=0, batch_size=16)
        if not compiled:
            sched.compiled = None
        tokens[compiled] = [final(h).tokens for h in run_batch(sched, prompts, n_predict=12)]
        if compiled:
            assert sched.compiled is not None and sched.compiled._layouts  # later prompts opened their caches
    assert tokens[True] == tokens[False]
