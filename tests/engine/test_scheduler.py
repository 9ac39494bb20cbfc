"""The scheduler stepped by hand: chunked prefill, interleaving, --no-cont-batching, mixed sampling, reports."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxd.engine.batching import compiled as compiled_module
from mlxd.engine.batching.detokenize import fast_decoder
from mlxd.engine.batching.handle import RequestHandle
from mlxd.engine.batching.samplers import ChainSampling, TokenizerVocab
from mlxd.engine.sampling import SamplingParams
from mlxd.engine.batching.scheduler import Scheduler
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.types import FinalEvent, TokenEvent
from tests.engine.conftest import PROMPTS, final, greedy_request


@pytest.fixture
def make_scheduler(tiny_model: Any):
    stream = mx.new_thread_local_stream(mx.default_device())

    def make(**settings: Any) -> Scheduler:
        cfg = WorkerSettings(ctx_size=2048, **settings)
        n_ctx = cfg.n_ctx_slot(tiny_model.n_ctx_train)
        vocab = TokenizerVocab(tiny_model.tokenizer, tiny_model.vocab_size, tiny_model.eos_token_ids)
        return Scheduler(tiny_model.model, decode=fast_decoder(tiny_model.tokenizer),
                         eos_ids=set(tiny_model.eos_token_ids), vocab_size=tiny_model.vocab_size, settings=cfg,
                         n_ctx_slot=n_ctx, sampling=ChainSampling(vocab, n_ctx))

    with mx.stream(stream):
        yield make


def add(scheduler: Scheduler, tokens: list[int], n: int, task: int) -> RequestHandle:
    handle = RequestHandle(greedy_request(tokens, n), task, lambda h: None)
    scheduler.add(handle)
    return handle


def run_until(scheduler: Scheduler, done: Any, limit: int = 10_000) -> None:
    for _ in range(limit):
        if done():
            return
        scheduler.step()
    raise AssertionError("the scheduler did not get there")


def seq_of(scheduler: Scheduler, handle: RequestHandle) -> Any:
    return next(s.seq for s in scheduler.slots.slots if s.seq is not None and s.seq.handle is handle)


def test_prefill_is_chunked_and_interleaved_with_decoding(tiny_model, make_scheduler) -> None:
    sched = make_scheduler(parallel=2, batch_size=8)
    a = add(sched, list(tiny_model.tokenizer.encode(PROMPTS[0])), 30, 1)
    run_until(sched, lambda: len(sched.batch) == 1)
    b = add(sched, list(range(100, 130)), 5, 2)
    sched.step()
    b_seq, a_seq = seq_of(sched, b), seq_of(sched, a)
    assert b_seq.n_past == 7  # --batch-size 8, less the one decoding row
    decoded = a_seq.n_decoded
    sched.step()
    assert b_seq.n_past == 14 and a_seq.n_decoded == decoded + 1
    run_until(sched, lambda: sched.idle)
    assert isinstance(b.result(), FinalEvent) and isinstance(a.result(), FinalEvent)


def test_no_prompt_pass_carries_more_than_the_ubatch_size(tiny_model, make_scheduler,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """-ub is b10621's physical batch: every forward pass of prompt processing carries at most that many tokens (a
    group's padding included) while -b still bounds a step; the cache is the one a single pass builds."""
    monkeypatch.setattr(compiled_module, "SHORT_PROMPT", 0)  # every pass the model's own, to be seen here
    sched = make_scheduler(parallel=3, batch_size=64, ubatch_size=8)
    model, passes = sched.model, []

    class Recording:  # the model, noting the shape of every uncompiled pass
        def __getattr__(self, name: str) -> Any:
            return getattr(model, name)

        def __call__(self, tokens: mx.array, **kwargs: Any) -> mx.array:
            passes.append(tuple(tokens.shape))
            return model(tokens, **kwargs)

    sched.model = Recording()
    prompt = list(range(100, 130))
    a = add(sched, prompt, 4, 1)
    sched.step()
    assert seq_of(sched, a).n_prompt_processed == 30  # the whole prompt in one step: it fits -b
    assert passes == [(1, 8), (1, 8), (1, 8), (1, 5)]  # its head in passes of -ub; the last token is a decode step's
    one_pass = make_prompt_cache(model)
    model(mx.array(prompt)[None], cache=one_pass)
    assert sched.batch.solo and sched.batch.cache is not None
    for chunked, whole in zip(sched.batch.cache, one_pass):
        # The same values up to float32 rounding: the products' reduction lengths differ with the pass's length.
        assert mx.allclose(chunked.keys[..., :30, :], whole.keys[..., :30, :], atol=1e-5).item()
        assert mx.allclose(chunked.values[..., :30, :], whole.values[..., :30, :], atol=1e-5).item()
    passes.clear()
    short = [add(sched, list(range(200 + 10 * i, 205 + 10 * i)), 3, 2 + i) for i in range(2)]
    run_until(sched, lambda: sched.idle)
    assert passes and all(rows * n <= 8 for rows, n in passes), passes  # two 5-token prompts: no group of 10
    assert all(len(final(h).tokens) == 3 for h in short) and len(final(a).tokens) == 4


def test_without_cont_batching_a_new_prompt_waits_for_the_batch_to_drain(tiny_model, make_scheduler) -> None:
    sched = make_scheduler(parallel=2, cont_batching=False)
    a = add(sched, list(tiny_model.tokenizer.encode(PROMPTS[0])), 12, 1)
    run_until(sched, lambda: len(sched.batch) == 1)
    b = add(sched, list(range(100, 130)), 5, 2)
    a_seq = seq_of(sched, a)
    sched.step()
    b_seq = seq_of(sched, b)  # b holds a slot now...
    steps = 0
    while any(s.seq is a_seq for s in sched.batch.slots):  # ...but its prompt waits while a decodes
        assert b_seq.n_past == 0
        sched.step()
        steps += 1
    assert steps >= 9 and b_seq.n_past == 30
    run_until(sched, lambda: sched.idle)
    assert len(final(a).tokens) == 12 and len(final(b).tokens) == 5


def test_sampled_and_greedy_rows_share_the_batch_and_match_their_solo_runs(tiny_model, make_worker) -> None:
    sampled = SamplingParams(temperature=0.9, seed=42, repeat_penalty=1.1)
    prompts = [list(tiny_model.tokenizer.encode(p)) for p in PROMPTS]
    requests = [greedy_request(p, 20, sampling=sampled if i % 2 else None) for i, p in enumerate(prompts)]
    for r in requests:
        if r.sampling is None:
            r.sampling = SamplingParams(temperature=0.0)
    solo_worker = make_worker(parallel=1, cache_ram=0)
    solo = [final(solo_worker.submit(r)).tokens for r in requests]
    worker = make_worker(parallel=4, cache_ram=0)
    together = [final(h).tokens for h in [worker.submit(r) for r in requests]]
    assert together == solo
    assert solo[1] != final(solo_worker.submit(greedy_request(prompts[1], 20))).tokens  # it really sampled


def test_probabilities_are_reported_per_token(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2)
    tokens = list(tiny_model.tokenizer.encode(PROMPTS[1]))
    request = greedy_request(tokens, 5, n_probs=3, sampling=SamplingParams(temperature=0.0, n_probs=3))
    events = [e for e in worker.submit(request) if isinstance(e, TokenEvent)]
    assert len(events) == 5
    for e in events:
        assert e.probs is not None and len(e.probs) == 3 and e.chosen is not None
        assert e.chosen.id == e.token_id == e.probs[0].id  # greedy: the most likely token
        assert e.chosen.prob <= 0.0  # a log-probability without post_sampling_probs
        assert e.probs[0].text == tiny_model.tokenizer.decode([e.token_id])


def test_t_max_predict_ms_stops_at_a_new_line(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    for text in PROMPTS:
        tokens = list(tiny_model.tokenizer.encode(text))
        events = [e for e in worker.submit(greedy_request(tokens, 60)) if isinstance(e, TokenEvent)]
        first_nl = next((i for i, e in enumerate(events) if "\n" in e.text), None)
        if first_nl is not None and first_nl >= 3:
            break
    else:
        pytest.fail("no prompt makes the tiny model write a new line")
    done = final(worker.submit(greedy_request(tokens, 60, t_max_predict_ms=1)))
    assert done.stop_type == "limit" and len(done.tokens) == first_nl + 1


def test_n_indent_cuts_a_line_indented_too_little(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    for text in PROMPTS:
        tokens = list(tiny_model.tokenizer.encode(text))
        free = final(worker.submit(greedy_request(tokens, 60))).text
        nl = free.find("\n")
        rest = free[nl + 1 :] if nl >= 0 else ""
        indent = len(rest) - len(rest.lstrip(" \t"))
        if nl >= 0 and indent < 4 and indent < len(rest):  # a next line that starts too far left
            break
    else:
        pytest.fail("no prompt makes the tiny model write a second line")
    done = final(worker.submit(greedy_request(tokens, 60, n_indent=4)))
    assert done.stop_type == "limit" and done.text == free[: nl + 1 + indent]


def test_prompts_arriving_together_equal_their_solo_runs(tiny_model, make_scheduler) -> None:
    prompts = [list(tiny_model.tokenizer.encode(p * (1 + i))) for i, p in enumerate(PROMPTS)]
    solo_sched = make_scheduler(parallel=1, cache_ram=0)
    solo = []
    for i, p in enumerate(prompts):
        handle = add(solo_sched, p, 12, i)
        run_until(solo_sched, lambda: solo_sched.idle)
        solo.append(final(handle).tokens)
    sched = make_scheduler(parallel=4, cache_ram=0)
    handles = [add(sched, p, 12, 10 + i) for i, p in enumerate(prompts)]
    sched.step()  # every prompt is processed in this one step, left-padded into one forward pass
    assert len(sched.batch) == 4 and not sched.prefilling
    run_until(sched, lambda: sched.idle)
    assert [final(h).tokens for h in handles] == solo


def test_a_lone_row_decodes_on_its_own_caches_and_rows_joining_or_leaving_keep_their_tokens(
    tiny_model, make_scheduler
) -> None:
    prompts = [list(tiny_model.tokenizer.encode(p)) for p in PROMPTS[:3]]
    lengths = [40, 6, 12]
    solo_sched = make_scheduler(parallel=1, cache_ram=0)
    solo = []
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        handle = add(solo_sched, p, n, i)
        run_until(solo_sched, lambda: solo_sched.idle)
        solo.append(final(handle).tokens)
    sched = make_scheduler(parallel=2, cache_ram=0)
    a = add(sched, prompts[0], lengths[0], 10)
    run_until(sched, lambda: len(sched.batch) == 1)
    assert sched.batch.solo  # alone: mlx_lm's plain per-layer caches, no batch mask
    b = add(sched, prompts[1], lengths[1], 11)
    run_until(sched, lambda: len(sched.batch) == 2)
    assert not sched.batch.solo  # b joined: both rows in one batched cache
    run_until(sched, lambda: len(sched.batch) == 1)  # b ran out of tokens first
    assert sched.batch.solo and sched.batch.slots[0].seq.handle is a
    c = add(sched, prompts[2], lengths[2], 12)
    run_until(sched, lambda: len(sched.batch) == 2)
    assert not sched.batch.solo
    run_until(sched, lambda: sched.idle)
    assert [final(h).tokens for h in (a, b, c)] == solo
