"""Worker-level options of llama-server: --special, --slot-prompt-similarity and --warmup / --no-warmup."""

from __future__ import annotations

import logging

import pytest

from mlxd.engine.sampling import SamplingParams
from mlxd.engine.batching.slots.table import Resident, SlotRegistry
from tests.engine.conftest import PROMPTS, final, greedy_request


def _forced(tiny_model, token: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, logit_bias={token: 1000.0})


@pytest.mark.parametrize("special", [False, True])
def test_special_renders_special_tokens_in_the_output(tiny_model, make_worker, special: bool) -> None:
    """A generated special token (here <|im_start|>, forced by a logit bias) is text only with --special."""
    marker = "<|im_start|>"
    token = tiny_model.tokenizer.convert_tokens_to_ids(marker)
    worker = make_worker(parallel=1, special=special)
    prompt = list(tiny_model.tokenizer.encode(PROMPTS[1]))
    done = final(worker.submit(greedy_request(prompt, 2, sampling=_forced(tiny_model, token))))
    assert list(done.tokens) == [token, token]
    assert done.text == (marker * 2 if special else "")


def test_slot_prompt_similarity_sets_the_share_a_slot_must_cover() -> None:
    prompt = list(range(20))
    for similarity, expected in ((0.1, 1), (0.6, 0), (0.0, 0)):
        reg = SlotRegistry(2, 64, similarity)
        reg.slots[0].t_last_used, reg.slots[1].t_last_used = 1.0, 2.0
        reg.slots[1].resident = Resident("raw", list(range(10)), [])  # half of the prompt
        assert reg.choose(prompt, "raw") is reg.slots[expected], similarity
    exact = SlotRegistry(2, 64, 0.5)  # upstream needs more than the threshold, not as much
    exact.slots[1].resident = Resident("raw", list(range(10)), [])
    exact.slots[0].t_last_used, exact.slots[1].t_last_used = 1.0, 2.0
    assert exact.choose(prompt, "raw") is exact.slots[0]


def test_slot_prompt_similarity_reaches_the_worker(make_worker) -> None:
    assert make_worker(parallel=1, slot_prompt_similarity=0.25).scheduler.slots.similarity == 0.25


@pytest.mark.parametrize("warmup", [True, False])
def test_warmup_runs_once_before_serving_unless_disabled(tiny_model, make_worker, reference, caplog,
                                                         warmup: bool) -> None:
    with caplog.at_level(logging.INFO, logger="mlxd.engine.loading.warmup"):
        worker = make_worker(parallel=1, warmup=warmup)
    runs = [r for r in caplog.records if r.name == "mlxd.engine.loading.warmup" and "warming up" in r.getMessage()]
    assert len(runs) == (1 if warmup else 0)
    tokens = list(tiny_model.tokenizer.encode(PROMPTS[0]))
    assert list(final(worker.submit(greedy_request(tokens, 8))).tokens) == reference(tokens, 8)
