"""``--spec-type ngram-simple``: proposals from a sequence's own history, verified as a draft model's are."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mlxd.engine.loading.loader import load_model
from mlxd.engine.speculative.ngram_draft import NgramConfig, propose
from mlxd.engine.sampling import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.worker import ModelWorker
from tests.conftest import synthetic_checkpoint
from tests.engine.conftest import final, greedy_request


def _b10621(history: list[int], sampled: int, n: int, m: int) -> list[int]:
    """common_ngram_simple_draft's loops, transcribed one to one: the oracle for the byte search."""
    cur = len(history)
    if cur <= n + m + 1:
        return []
    pattern = history[cur - n + 1:] + [sampled]
    match = 0
    for j in range(cur - n - 1, 0, -1):
        if history[j:j + n] == pattern:
            match = j
            break
    if match == 0:
        return []
    copy = min(m, cur - (match + n))
    return [] if copy < n else history[match + n:match + n + copy]


@pytest.mark.parametrize("seed", range(40))
def test_proposals_are_b10621s(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.choice([(1, 3), (2, 4), (3, 8), (12, 48)])
    # Few distinct tokens, so patterns recur; values above 255 catch a byte-aligned search.
    alphabet = [rng.randrange(1, 70000) for _ in range(rng.choice([2, 3, 5]))]
    history = [rng.choice(alphabet) for _ in range(rng.randrange(0, 160))]
    sampled = rng.choice(alphabet)
    assert propose(history, sampled, NgramConfig(n, m), limit=1000) == _b10621(history, sampled, n, m)


def test_a_repeat_is_proposed_and_cut_to_the_room_left() -> None:
    text = list(range(100, 140))
    history = text + text[:20]
    got = propose(history, text[20], NgramConfig(3, 8), limit=1000)
    assert got == text[21:29]
    assert propose(history, text[20], NgramConfig(3, 8), limit=5) == text[21:26]
    assert propose(history, 7, NgramConfig(3, 8), limit=1000) == []  # the pattern never occurred
    # A match that ends in the middle of a token's bytes is no match (256 = 00 01 00 00, 1 = 01 00 00 00).
    assert propose([256, 1, 0, 9] * 5 + [256], 1, NgramConfig(2, 2), limit=10) == [0, 9]


@pytest.fixture(scope="module")
def model() -> Any:
    return load_model(synthetic_checkpoint("tiny"))


def _run(model: Any, prompts: list[list[int]], n: int, sampling: Any = None, **settings: Any
         ) -> tuple[list[list[int]], dict[str, Any] | None]:
    worker = ModelWorker(model, WorkerSettings(ctx_size=4096, parallel=4, **settings))
    worker.start()
    try:
        requests = [greedy_request(p, n) if sampling is None else greedy_request(p, n, sampling=sampling)
                    for p in prompts]
        handles = [worker.submit(r) for r in requests]
        return [final(h).tokens for h in handles], worker.speculative_info()
    finally:
        worker.stop(0.0)


def _prompts(model: Any) -> list[list[int]]:
    # A random-weight model loops soon after a repetitive prompt: the n-gram lookup then has matches to offer.
    texts = ["def f(x):\n    return x + 1\n" * 6, "one two three four " * 10, "abc" * 30, "The quick brown fox"]
    return [list(model.tokenizer.encode(t)) for t in texts]


def test_greedy_output_is_unchanged_and_proposals_are_accepted(model: Any) -> None:
    prompts = _prompts(model)
    plain, none = _run(model, prompts, 64)
    spec, info = _run(model, prompts, 64, spec_type=["ngram-simple"], spec_ngram_simple_size_n=3,
                      spec_ngram_simple_size_m=8)
    assert none is None and info is not None and info["type"] == "ngram-simple"
    assert spec == plain
    assert info["n_drafted"] > 0 and info["n_accepted"] > 0


def test_sampling_rows_verify_fixed_proposals(model: Any) -> None:
    prompts = _prompts(model)
    sampling = SamplingParams(temperature=0.7, seed=5)
    first, info = _run(model, prompts, 48, sampling=sampling, spec_type=["ngram-simple"],
                       spec_ngram_simple_size_n=3, spec_ngram_simple_size_m=8)
    again, _ = _run(model, prompts, 48, sampling=sampling, spec_type=["ngram-simple"],
                    spec_ngram_simple_size_n=3, spec_ngram_simple_size_m=8)
    assert info is not None and info["n_drafted"] > 0
    assert first == again  # the seed fixes both the chain's draws and the acceptance draws
    assert all(len(t) == 48 for t in first)
