"""The worker's reasoning budget (forced end of reasoning), ``reasoning_end`` on a running request, and prompt
progress events, on the tiny checkpoint."""

from __future__ import annotations

from typing import Any

from mlxd.engine.types import FinalEvent, ProgressEvent, ReasoningSpec, TokenEvent
from tests.engine.conftest import PROMPTS, final, greedy_request


def encode(tiny_model: Any, text: str) -> list[int]:
    return list(tiny_model.tokenizer.encode(text, add_special_tokens=False))


def forced_ids(tiny_model: Any, text: str) -> list[int]:
    return encode(tiny_model, text)


def test_budget_forces_message_and_end_tag_after_n_reasoning_tokens(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    prompt = encode(tiny_model, PROMPTS[0])
    free = final(worker.submit(greedy_request(prompt, n_predict=12)))
    spec = ReasoningSpec(budget=3, message=" Enough.", starts_in_reasoning=True)
    events = list(worker.submit(greedy_request(prompt, n_predict=12, reasoning=spec)))
    done = events[-1]
    assert isinstance(done, FinalEvent)
    forced = forced_ids(tiny_model, " Enough.</think>")
    # The prompt left reasoning open: 3 generated tokens spend the budget, the forced end follows at once.
    assert list(done.tokens[:3]) == list(free.tokens[:3])
    assert list(done.tokens[3 : 3 + len(forced)]) == forced
    # The forced tokens are ordinary token events: the stream shows them.
    streamed = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert streamed == done.text and " Enough.</think>" in streamed


def test_budget_zero_ends_reasoning_at_once(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=2)
    prompt = encode(tiny_model, PROMPTS[1])
    spec = ReasoningSpec(budget=0, starts_in_reasoning=True)
    done = final(worker.submit(greedy_request(prompt, n_predict=8, reasoning=spec)))
    forced = forced_ids(tiny_model, "</think>")
    assert list(done.tokens[: len(forced)]) == forced
    assert done.text.startswith("</think>")


def test_no_budget_outside_reasoning_changes_nothing(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    prompt = encode(tiny_model, PROMPTS[2])
    free = final(worker.submit(greedy_request(prompt, n_predict=10)))
    spec = ReasoningSpec(budget=0, starts_in_reasoning=False, start_tag="<never-emitted>")
    done = final(worker.submit(greedy_request(prompt, n_predict=10, reasoning=spec)))
    assert done.tokens == free.tokens


def test_reasoning_end_forces_the_end_of_a_running_request(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    prompt = encode(tiny_model, PROMPTS[3])
    spec = ReasoningSpec(budget=-1, message=" Done.", starts_in_reasoning=True, controllable=True)
    handle = worker.submit(greedy_request(prompt, n_predict=200, reasoning=spec))
    seen = 0
    events = []
    for event in handle:
        events.append(event)
        if isinstance(event, TokenEvent):
            seen += 1
            if seen == 3:
                worker.end_reasoning(handle)
    done = events[-1]
    assert isinstance(done, FinalEvent)
    assert " Done.</think>" in done.text
    cut = done.text.index(" Done.</think>")
    assert cut > 0  # some reasoning was generated before the end was forced


def test_reasoning_end_without_a_reasoning_budget_is_a_no_op(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1)
    prompt = encode(tiny_model, PROMPTS[0])
    free = final(worker.submit(greedy_request(prompt, n_predict=30)))
    handle = worker.submit(greedy_request(prompt, n_predict=30))
    worker.end_reasoning(handle)
    assert final(handle).tokens == free.tokens


def test_progress_events_report_each_prompt_chunk_before_the_first_token(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1, batch_size=8, cache_ram=0)
    prompt = encode(tiny_model, PROMPTS[0] * 4)
    assert len(prompt) > 16
    events = list(worker.submit(greedy_request(prompt, n_predict=4, return_progress=True)))
    progress = [e for e in events if isinstance(e, ProgressEvent)]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenEvent))
    assert progress and all(isinstance(e, ProgressEvent) for e in events[:first_token])
    assert [p.processed for p in progress] == sorted(p.processed for p in progress)
    assert progress[-1].processed == progress[-1].total == len(prompt)
    # b10621's first update comes before any prompt token is computed, then one per chunk.
    assert progress[0].processed == progress[0].cache == 0
    assert len(progress) == 1 + -(-len(prompt) // 8)
    assert all(p.cache == 0 and p.time_ms >= 0 for p in progress)


def test_no_progress_events_unless_asked(tiny_model, make_worker) -> None:
    worker = make_worker(parallel=1, batch_size=8)
    events = list(worker.submit(greedy_request(encode(tiny_model, PROMPTS[0] * 4), n_predict=2)))
    assert not any(isinstance(e, ProgressEvent) for e in events)
