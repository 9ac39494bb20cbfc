"""``--spec-type ngram-mod``: b10621's hashed n-gram table, shared by every sequence, as the target verifies any
draft's proposals."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mlxd.engine.speculative.ngram_mod import EMPTY, NgramMod, NgramModConfig, SequenceState
from tests.engine.conftest import generate_greedy


class B10621:
    """common_ngram_mod and common_speculative_impl_ngram_mod's begin / draft_one / accept, transcribed one to one
    with scalar loops: the oracle for the vectorized table and the rolling hash."""

    def __init__(self, n: int, n_min: int, n_max: int, size: int) -> None:
        self.n, self.n_min, self.n_max = n, n_min, n_max
        self.entries, self.used = [EMPTY] * size, 0
        self.i_last, self.n_draft_last, self.n_low = 0, 0, 0

    def idx(self, tokens: list[int]) -> int:
        res = 0
        for i in range(self.n):
            res = (res * 6364136223846793005 + tokens[i]) % (1 << 64)
        return res % len(self.entries)

    def add(self, tokens: list[int]) -> None:
        i = self.idx(tokens)
        if self.entries[i] == EMPTY:
            self.used += 1
        self.entries[i] = tokens[self.n]

    def reset(self) -> None:
        self.entries, self.used = [EMPTY] * len(self.entries), 0

    def begin(self, prompt: list[int]) -> None:
        self.i_last = self.n_draft_last = 0
        if len(prompt) < self.n:
            return
        for i in range(len(prompt) - self.n):
            self.add(prompt[i:])
        self.i_last = len(prompt) - self.n
        if self.used / len(self.entries) > 0.25:
            self.reset()

    def draft_one(self, prompt: list[int], id_last: int) -> list[int]:
        self.n_draft_last = 0
        cur, n = len(prompt), self.n
        if cur < n:
            return []
        if self.i_last + 32 < cur:
            for i in range(self.i_last, cur - n):
                self.add(prompt[i:])
            self.i_last = cur - n
        result = [0] * (n + self.n_max)
        for i in range(n - 1):
            result[i] = prompt[cur - n + 1 + i]
        result[n - 1] = id_last
        for i in range(self.n_max):
            token = self.entries[self.idx(result[i:])]
            if token == EMPTY:
                if i < self.n_min:
                    return []
                result = result[: n + i]
                break
            result[n + i] = token
        self.n_draft_last = len(result) - n
        return result[n:]

    def accept(self, n_accepted: int) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.reset()
                    self.n_low, self.i_last = 0, 0
            else:
                self.n_low = 0


@pytest.mark.parametrize("seed", range(30))
def test_table_and_proposals_are_b10621s(seed: int) -> None:
    rng = random.Random(seed)
    n, n_min, n_max = rng.choice([(1, 0, 4), (2, 1, 6), (3, 2, 8), (4, 3, 16)])
    size = rng.choice([257, 4096])  # small, so that hashes collide
    ours, oracle = NgramMod(NgramModConfig(n, n_min, n_max), size=size), B10621(n, n_min, n_max, size)
    state = SequenceState()
    alphabet = [rng.randrange(0, 70000) for _ in range(rng.choice([2, 3, 6]))]
    prompt = [rng.choice(alphabet) for _ in range(rng.randrange(0, 80))]
    ours.begin(state, prompt)
    oracle.begin(prompt)
    history = list(prompt)
    for _ in range(60):
        sampled = rng.choice(alphabet)
        got, want = ours.propose(state, history, sampled, limit=1000), oracle.draft_one(history, sampled)
        assert got == want and state.n_draft_last == oracle.n_draft_last
        kept = rng.randrange(0, len(want) + 1)
        ours.accepted(state, kept)
        oracle.accept(kept)
        history += [sampled] + want[:kept]
        assert list(ours.entries) == oracle.entries and ours.used == oracle.used
        assert (state.i_last, state.n_low) == (oracle.i_last, oracle.n_low)


def test_a_repeat_is_proposed_from_n_min_to_n_max_and_cut_to_the_room() -> None:
    mod = NgramMod(NgramModConfig(n_match=3, n_min=4, n_max=8), size=1 << 16)
    text = list(range(100, 140))
    state = SequenceState()
    mod.begin(state, text + text[:10])
    assert mod.propose(state, text + text[:10], text[10], limit=1000) == text[11:19]  # n_max
    assert mod.propose(state, text + text[:10], text[10], limit=3) == text[11:14]  # the row's room
    assert state.n_draft_last == 8  # the whole chain, as b10621 counts it for acceptance
    other = NgramMod(NgramModConfig(n_match=3, n_min=4, n_max=8), size=1 << 16)
    other.begin(SequenceState(), text)  # nothing follows its last tokens: a chain from 136 breaks after 3 tokens
    assert other.propose(SequenceState(), text[:36], text[36], limit=1000) == []
    assert other.propose(SequenceState(), text[:35], text[35], limit=1000) == text[36:40]  # 4 = n_min


def test_a_full_table_and_a_refused_streak_empty_it() -> None:
    mod = NgramMod(NgramModConfig(n_match=1, n_min=1, n_max=2), size=64)
    state = SequenceState()
    mod.begin(state, list(range(30)))  # 29 entries: less than a quarter of 64 is not true, so it empties
    assert mod.used == 0
    mod.begin(state, [1, 2, 1, 2, 1, 2])
    assert mod.used > 0
    for _ in range(5):
        assert mod.propose(state, [1, 2, 1, 2, 1], 2, limit=10) == [1, 2]
        mod.accepted(state, 0)
    assert mod.used == 0 and state.i_last == 0


def test_greedy_output_is_unchanged_and_the_table_serves_every_sequence(tiny_model: Any) -> None:
    """Four requests at once share one table; proposals are verified in the batch, greedy tokens unchanged. With
    ngram-simple too, ngram-simple goes first and ngram-mod serves the rows it finds nothing for."""
    texts = ["def f(x):\n    return x + 1\n" * 6, "one two three four " * 10, "abc" * 30, "The quick brown fox"]
    prompts = [list(tiny_model.tokenizer.encode(t)) for t in texts]
    plain, none = generate_greedy(tiny_model, prompts, 64, parallel=4)
    mod = dict(spec_ngram_mod_n_match=4, spec_ngram_mod_n_min=2, spec_ngram_mod_n_max=16)
    spec, info = generate_greedy(tiny_model, prompts, 64, parallel=4, spec_type=["ngram-mod"], **mod)
    assert none is None and info is not None and info["type"] == "ngram-mod"
    assert (info["ngram_mod_n_match"], info["ngram_mod_n_min"], info["ngram_mod_n_max"]) == (4, 2, 16)
    assert spec == plain
    assert info["n_drafted"] > 0 and info["n_accepted"] > 0
    both, info = generate_greedy(tiny_model, prompts, 64, parallel=4, spec_type=["ngram-simple", "ngram-mod"],
                                 spec_ngram_simple_size_n=3, spec_ngram_simple_size_m=8, **mod)
    assert both == plain and info is not None and info["type"] == "ngram-simple,ngram-mod"
