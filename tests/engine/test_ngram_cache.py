"""``--spec-type ngram-cache``: b10621's lookup decoding from n-gram statistics of the slot's history and of
llama.cpp lookup-cache files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.speculative import ngram_cache as nc
from mlxd.engine.speculative.ngram_cache import NULL, NgramCaches
from mlxd.errors import EngineError
from tests.engine.conftest import generate_greedy


class B10621:
    """common_ngram_cache_update / _draft and the server's draft_one, transcribed one to one with index loops."""

    LAX = ([2, 2, 1, 1], [66, 50, 50, 50])
    STRICT = ([4, 3, 2, 2], [75, 66, 66, 66])

    def __init__(self, static: dict[Any, dict[int, int]], dynamic: dict[Any, dict[int, int]]) -> None:
        self.static, self.dynamic, self.cache_size = static, dynamic, 0
        self.context: dict[Any, dict[int, int]] = {}

    @staticmethod
    def key(tokens: list[int]) -> tuple[int, ...]:
        return tuple(tokens[i] if i < len(tokens) else -1 for i in range(4))

    @classmethod
    def update(cls, cache: dict[Any, dict[int, int]], inp: list[int], nnew: int) -> None:
        for size in range(1, 5):
            i = max(len(inp) - nnew, size)
            while i < len(inp):
                part = cache.setdefault(cls.key(inp[i - size:i]), {})
                part[inp[i]] = part.get(inp[i], 0) + 1
                i += 1

    def try_primary(self, primary: dict[Any, dict[int, int]], grams: list[Any], part_static: dict[int, int],
                    thresholds: tuple[list[int], list[int]]) -> int:
        drafted = -1
        i = len(grams) - 1
        while i >= 0 and drafted == -1:
            part = primary.get(grams[i])
            if part is not None:
                max_p = max_s = total = 0
                best = -1
                for token, count in part.items():
                    count_s = 100 * part_static[token] if token in part_static else 1
                    if count * count_s > max_p * max_s:
                        best, max_p, max_s = token, count, count_s
                    total += count
                if total >= thresholds[0][i] and 100 * max_p >= thresholds[1][i] * total:
                    drafted = best
            i -= 1
        return drafted

    def try_static(self, gram: Any) -> int:
        part = self.static.get(gram)
        if part is None:
            return -1
        max_c = total = 0
        best = -1
        for token, count in part.items():
            if count > max_c:
                best, max_c = token, count
            total += count
        if total < 2 or 100 * max_c < 50 * total:
            return -1
        return best

    def draft_one(self, prompt: list[int], id_last: int) -> list[int]:
        if self.cache_size < len(prompt) + 1:
            new = prompt[self.cache_size:] + [id_last]
            self.update(self.context, new, len(new))
            self.cache_size = len(prompt) + 1
        inp = prompt + [id_last]
        draft = [id_last]
        if len(inp) >= 2:
            while len(draft) - 1 < 8:
                def tok(j: int) -> int:
                    return inp[j] if j < len(inp) else draft[1 + j - len(inp)]
                start = len(inp) - 2 + len(draft) - 1
                gram_static = self.key([tok(j) for j in range(start, start + 2)])
                part_static = self.static.get(gram_static, {})
                grams = []
                for size in range(1, 5):
                    s = len(inp) - size + len(draft) - 1
                    grams.append(self.key([tok(j) if j >= 0 else -1 for j in range(s, s + size)]))
                token = self.try_primary(self.context, grams, part_static, self.LAX)
                if token == -1:
                    token = self.try_primary(self.dynamic, grams, part_static, self.STRICT)
                if token == -1:
                    token = self.try_static(gram_static)
                if token == -1:
                    break
                draft.append(token)
        return draft[1:]


def _corpus(rng: random.Random, alphabet: list[int], length: int) -> list[int]:
    return [rng.choice(alphabet) for _ in range(length)]


@pytest.mark.parametrize("seed", range(20))
def test_proposals_are_b10621s(seed: int) -> None:
    """Random streams over a small alphabet, with static and dynamic caches counted from other random text, and
    two requests in one slot (the context cache carries over, as b10621's does)."""
    rng = random.Random(seed)
    alphabet = rng.sample(range(1, 70000), rng.choice([2, 3, 5]))
    static: nc.Cache = {}
    dynamic: nc.Cache = {}
    nc.update(static, _corpus(rng, alphabet, rng.randrange(0, 300)), 10**6)
    nc.update(dynamic, _corpus(rng, alphabet, rng.randrange(0, 300)), 10**6)
    ours, oracle = NgramCaches(static, dynamic), B10621(static, dynamic)
    proposed = 0
    for _ in range(2):
        history = _corpus(rng, alphabet, rng.randrange(1, 30))
        for _ in range(40):
            sampled = rng.choice(alphabet)
            want = oracle.draft_one(history, sampled)
            assert ours.propose(0, history, sampled) == want
            proposed += len(want)
            history += [sampled] + want[: rng.randrange(0, len(want) + 1)]
    assert proposed > 0


def test_update_counts_every_ngram_size_within_the_new_tokens() -> None:
    cache: nc.Cache = {}
    nc.update(cache, [5, 6, 5, 6, 7], 5)
    assert cache[(5, NULL, NULL, NULL)] == {6: 2}
    assert cache[(5, 6, NULL, NULL)] == {5: 1, 7: 1}
    assert cache[(5, 6, 5, 6)] == {7: 1}
    oracle: dict[Any, dict[int, int]] = {}
    B10621.update(oracle, [5, 6, 5, 6, 7], 5)
    assert oracle == cache


def test_a_cache_file_round_trips_in_llama_cpp_format(tmp_path: Path) -> None:
    cache: nc.Cache = {}
    nc.update(cache, [1, 2, 3, 1, 2, 4, 1, 2, 3], 9)
    path = tmp_path / "lookup.bin"
    nc.save(cache, path)
    # Per n-gram: 4 tokens, a follower count, then (token, count) pairs; int32 each.
    assert path.stat().st_size == 4 * sum(5 + 2 * len(part) for part in cache.values())
    assert nc.load(path) == cache


def test_a_bad_cache_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "lookup.bin"
    nc.save({(1, 2, NULL, NULL): {3: 4}}, path)
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(EngineError, match=r"lookup cache .*lookup\.bin is not in llama\.cpp's format"):
        nc.load(path)
    with pytest.raises(EngineError, match=r"cannot read the lookup cache .*missing\.bin"):
        nc.load(tmp_path / "missing.bin")


def test_a_static_cache_proposes_what_the_corpus_continues_with() -> None:
    corpus = [10, 11, 12, 13] * 4
    static: nc.Cache = {}
    nc.update(static, corpus, len(corpus))
    caches = NgramCaches(static=static)
    assert caches.propose(0, [99, 10], 11) == [12, 13, 10, 11, 12, 13, 10, 11]  # N_DRAFT tokens
    assert caches.peek(1, [99, 10], 11) and not caches.peek(2, [99, 98], 97)


def test_greedy_output_is_unchanged_and_a_static_cache_file_serves(tiny_model: Any, tmp_path: Path) -> None:
    """A static cache counted from text like what the model writes (here: its own plain output) proposes long runs
    the target accepts; greedy tokens stay those of plain decoding. (The context cache alone learns from the prompt
    and from multi-token acceptances only, as b10621's: the tiny model's output does not repeat its prompts.)"""
    texts = ["def f(x):\n    return x + 1\n" * 6, "one two three four " * 10, "abc" * 30, "The quick brown fox"]
    prompts = [list(tiny_model.tokenizer.encode(t)) for t in texts]
    plain, _ = generate_greedy(tiny_model, prompts, 64, parallel=2)
    static: nc.Cache = {}
    for tokens in plain:
        nc.update(static, tokens, len(tokens))
    nc.save(static, tmp_path / "static.bin")
    spec, info = generate_greedy(tiny_model, prompts, 64, parallel=2, spec_type=["ngram-cache"],
                                 lookup_cache_static=str(tmp_path / "static.bin"))
    assert info is not None and info["type"] == "ngram-cache"
    assert spec == plain
    assert info["n_drafted"] >= info["n_accepted"] > 64
