"""The model worker end to end on the tiny checkpoint: mlx_lm parity, batching, limits, refusals, cancellation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mlxd.engine.types import ErrorEvent, FinalEvent, TokenEvent
from mlxd.errors import ContextOverflow, EngineError, InvalidRequest, QueueFull
from tests.e2e import captures
from tests.engine.conftest import PROMPTS, final, greedy_request



def encode(tiny_model: Any, text: str) -> list[int]:
    return list(tiny_model.tokenizer.encode(text))


def test_greedy_output_equals_mlx_lm(tiny_model, make_worker, reference) -> None:
    worker = make_worker(parallel=1)
    for text in PROMPTS:
        tokens = encode(tiny_model, text)
        done = final(worker.submit(greedy_request(tokens, n_predict=24)))
        assert list(done.tokens) == reference(tokens, 24), text
        assert done.stop_type == "limit" and not done.truncated
        assert done.timings.prompt_n == len(tokens) and done.timings.predicted_n == 24


def test_concurrent_requests_each_equal_their_solo_run(tiny_model, make_worker) -> None:
    solo_worker = make_worker(parallel=1, cache_ram=0)
    lengths = [5, 40, 17, 29, 11, 33]
    prompts = [encode(tiny_model, PROMPTS[i % len(PROMPTS)] * (1 + i % 3)) for i in range(len(lengths))]
    solo = [final(solo_worker.submit(greedy_request(p, n))).tokens for p, n in zip(prompts, lengths)]

    worker = make_worker(parallel=4, cache_ram=0, batch_size=8)  # small chunks: prefill interleaves decoding
    handles = [worker.submit(greedy_request(p, n)) for p, n in zip(prompts, lengths)]
    together = [final(h).tokens for h in handles]
    assert together == solo


def test_streamed_pieces_add_up_to_the_text(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2)
    events = list(worker.submit(greedy_request(encode(tiny_model, PROMPTS[1]), n_predict=20)))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    done = events[-1]
    assert isinstance(done, FinalEvent) and len(tokens) == 20
    assert [e.index for e in tokens] == list(range(20))
    assert "".join(e.text for e in tokens) == done.text


def test_stop_string_ends_generation_and_is_never_streamed(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    tokens = encode(tiny_model, PROMPTS[2])
    full = final(worker.submit(greedy_request(tokens, n_predict=40))).text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), full
    events = list(worker.submit(greedy_request(tokens, n_predict=40, stop=["never-there", stop])))
    done = events[-1]
    assert isinstance(done, FinalEvent)
    assert done.stop_type == "word" and done.stopping_word == stop
    assert done.text == full[: full.index(stop)]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == done.text


def test_n_predict_zero_generates_nothing(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    done = final(worker.submit(greedy_request(encode(tiny_model, PROMPTS[0]), n_predict=0)))
    assert done.tokens == () and done.text == "" and done.stop_type == "none"
    assert done.timings.prompt_n == len(encode(tiny_model, PROMPTS[0]))


def test_n_predict_unlimited_stops_at_the_slot_context(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2, ctx_size=96)  # 48 tokens per slot
    tokens = encode(tiny_model, PROMPTS[1])
    done = final(worker.submit(greedy_request(tokens, n_predict=-1)))
    assert done.truncated and done.stop_type == "limit"
    assert len(tokens) + len(done.tokens) == 48


def test_prompt_larger_than_the_slot_context_is_refused(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2, ctx_size=64)
    with pytest.raises(ContextOverflow) as info:
        worker.submit(greedy_request(list(range(10, 42))))
    err = info.value
    assert (err.n_prompt_tokens, err.n_ctx, err.status, err.type) == (32, 32, 400, "exceed_context_size_error")
    upstream = captures.load("err_prompt_exceeds_context").json()["error"]["message"]
    assert err.message == upstream.replace("801", "32").replace("256", "32")


def test_queue_full_is_refused(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1, queue_max=1)
    tokens = encode(tiny_model, PROMPTS[0])
    running = [worker.submit(greedy_request(tokens, n_predict=-1)) for _ in range(2)]
    with pytest.raises(QueueFull, match="slots are in use"):
        worker.submit(greedy_request(tokens))
    for handle in running:
        handle.cancel()
        assert isinstance(handle.result(), ErrorEvent)
    assert final(worker.submit(greedy_request(tokens, n_predict=2))).tokens


def test_cancel_frees_the_slot_and_its_cache(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    handle = worker.submit(greedy_request(encode(tiny_model, PROMPTS[3]), n_predict=-1))
    first = next(iter(handle))
    assert isinstance(first, TokenEvent)
    handle.cancel()
    assert isinstance(handle.result(), ErrorEvent)
    deadline = time.monotonic() + 10
    while worker.slots()[0]["is_processing"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not worker.slots()[0]["is_processing"]
    assert worker.scheduler.slots.slots[0].resident is None
    assert worker.n_in_flight == 0


def test_a_failing_request_fails_alone(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=4, cache_ram=0)
    good = [encode(tiny_model, p) for p in PROMPTS[:3]]
    solo = [final(worker.submit(greedy_request(p, 12))).tokens for p in good]
    bad = good[0] + [tiny_model.vocab_size + 7]  # a token id outside the vocabulary
    handles = [worker.submit(greedy_request(p, 12)) for p in good[:1]]
    failing = worker.submit(greedy_request(bad, 12))
    handles += [worker.submit(greedy_request(p, 12)) for p in good[1:]]
    error = failing.result()
    assert isinstance(error, ErrorEvent) and error.code == 400 and "out of the vocabulary" in error.message
    assert [final(h).tokens for h in handles] == solo
    assert final(worker.submit(greedy_request(good[0], 12))).tokens == solo[0]


def test_async_iteration_from_an_event_loop(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2)
    tokens = encode(tiny_model, PROMPTS[0])
    expected = final(worker.submit(greedy_request(tokens, 10))).tokens

    async def read() -> list[Any]:
        return [event async for event in worker.submit(greedy_request(tokens, 10))]

    events = asyncio.run(read())
    assert isinstance(events[-1], FinalEvent) and events[-1].tokens == expected
    assert len(events) == 11

    async def read_many() -> list[list[Any]]:
        async def one(n: int) -> list[Any]:
            return [event async for event in worker.submit(greedy_request(tokens, n))]

        return await asyncio.gather(*(one(40 + i) for i in range(6)))

    for i, got in enumerate(asyncio.run(read_many())):  # no wake-up is lost between the threads
        assert len(got) == 41 + i and isinstance(got[-1], FinalEvent)


def test_pinned_slot_and_invalid_slot(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2)
    tokens = encode(tiny_model, PROMPTS[0])
    assert final(worker.submit(greedy_request(tokens, 3, id_slot=1))).id_slot == 1
    with pytest.raises(InvalidRequest, match="Invalid slot ID"):
        worker.submit(greedy_request(tokens, 3, id_slot=2))


def test_slots_render_upstream_keys(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2, ctx_size=512)
    upstream = captures.load("get_slots_after").json()
    idle = worker.slots()
    assert [list(s) for s in idle] == [["id", "n_ctx", "speculative", "is_processing"]] * 2
    assert idle[0]["n_ctx"] == 256
    final(worker.submit(greedy_request(encode(tiny_model, PROMPTS[0]), 3, id_slot=0, display_params={"seed": 1})))
    after = worker.slots()[0]
    assert list(after) == list(upstream[0])
    assert list(after["next_token"][0]) == list(upstream[0]["next_token"][0])
    assert after["params"] == {"seed": 1} and after["is_processing"] is False


def test_context_shift_is_refused_for_positions_it_cannot_move() -> None:
    from types import SimpleNamespace

    from mlxd.engine.settings import WorkerSettings
    from mlxd.engine.batching.worker import ModelWorker

    alibi = SimpleNamespace(layers=[SimpleNamespace(self_attn=SimpleNamespace(rope=None))])
    with pytest.raises(EngineError, match="--context-shift is not supported for odd: .*not plain RoPE"):
        ModelWorker(SimpleNamespace(model=alibi, name="odd"), WorkerSettings(context_shift=True))


def test_stop_drains_then_ends_what_is_left(tiny_model, make_worker) -> None:
    from mlxd.errors import Unavailable

    worker = make_worker(parallel=2, ctx_size=16384)  # the endless one cannot reach its context end meanwhile
    tokens = encode(tiny_model, PROMPTS[0])
    short = worker.submit(greedy_request(tokens, 8))
    endless = worker.submit(greedy_request(tokens, -1))
    worker.stop(drain_timeout=0.5)
    assert isinstance(short.result(), FinalEvent)
    assert isinstance(endless.result(), ErrorEvent) and worker.n_in_flight == 0
    with pytest.raises(Unavailable):
        worker.submit(greedy_request(tokens, 2))
