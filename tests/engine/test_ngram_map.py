"""``--spec-type ngram-map-k`` / ``ngram-map-k4v``: b10621's per-slot n-gram map, its proposals verified as any
draft's."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mlxd.engine.speculative.ngram_map import HASH_SIZE, MAX_COUNT, MAX_VALUES, NgramMap, NgramMapConfig
from tests.engine.conftest import generate_greedy


class B10621:
    """common_ngram_map_begin / _draft / _accept transcribed one to one with scalar loops (a full hash array, keys
    as lists, values shifted by hand): the oracle for engine.speculative.ngram_map's byte searches and vectorized hashes."""

    def __init__(self, n: int, m: int, key_only: bool, min_hits: int) -> None:
        self.n, self.m, self.key_only, self.min_hits = n, m, key_only, min_hits
        self.keys: list[dict[str, Any]] = []
        self.key_map = [0] * HASH_SIZE
        self.key_map_last_idx = self.size_last_begin = self.idx_last_check = 0
        self.last: tuple[int, int] | None = None

    def hash(self, tokens: list[int], start: int) -> int:
        h = 0
        for i in range(self.n):
            h = (h * 2654435761 + tokens[start + i]) % (1 << 32)
        return h % HASH_SIZE

    def match(self, tokens: list[int], at: int, key: list[int]) -> bool:
        return all(tokens[at + k] == key[k] for k in range(self.n))

    def begin(self, tokens: list[int]) -> None:
        n, m, size = self.n, self.m, len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size:
            cleanup = size - n - m if size > n + m else 0
        if size < self.idx_last_check:
            for i in range(HASH_SIZE):
                if self.key_map[i] != 0 and self.key_map[i] >= cleanup:
                    self.key_map[i] = 0
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
        if size < self.idx_last_check and self.keys:
            for i in range(len(self.keys) - 1, -1, -1):
                key = self.keys[i]
                if key["idx"] >= cleanup:
                    del self.keys[i]
                    continue
                if self.key_only:
                    continue
                values = key["values"]
                for j in range(MAX_VALUES - 1, -1, -1):
                    if values[j][0] != 0 and values[j][0] >= cleanup:
                        for k in range(j, MAX_VALUES - 1):
                            values[k] = list(values[k + 1])
                        values[MAX_VALUES - 1][0] = values[MAX_VALUES - 1][1] = 0
                if values[0][0] == 0:
                    del self.keys[i]
        self.idx_last_check = self.size_last_begin = size

    def draft(self, inp: list[int], sampled: int) -> list[int]:
        self.last = None
        n, m, cur = self.n, self.m, len(inp)
        if cur < 2 * n + m:
            return []
        self.idx_last_check = cur
        key_tokens = [inp[j] for j in range(cur - n + 1, cur)] + [sampled]
        match_pos = 0
        idx_key = self.key_map[self.hash(key_tokens, 0)]
        if idx_key != 0 and idx_key < cur - n - m - 1 and self.match(inp, idx_key, key_tokens):
            match_pos = idx_key
        if match_pos == 0 and self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                if self.match(inp, j, key_tokens):
                    match_pos = j
                    break
                j -= 1
        if match_pos == 0:
            j = cur - n - m - 1
            while j > self.size_last_begin and j > self.key_map_last_idx:
                if self.match(inp, j, key_tokens):
                    match_pos = j
                    break
                j -= 1
        if self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                h = self.hash(inp, j)
                if self.key_map[h] == 0:
                    self.key_map[h] = j
                j -= 1
        j = cur - n - m - 1
        while j > self.size_last_begin and j > self.key_map_last_idx:
            h = self.hash(inp, j)
            if self.key_map[h] == 0:
                self.key_map[h] = j
            j -= 1
        self.key_map_last_idx = max(cur - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            return []
        offset = len(self.keys)
        for i, key in enumerate(self.keys):
            if self.match(inp, key["idx"], key_tokens):
                offset = i
                break
        if offset == len(self.keys):
            self.keys.append({"idx": match_pos, "stat": 0, "num": 0, "values": [[0, 0, m] for _ in range(MAX_VALUES)]})
        key = self.keys[offset]
        key["num"] = min(key["num"] + 1, MAX_COUNT)
        values = key["values"]
        if self.key_only:
            self.last = (offset, 0)
            return [inp[match_pos + n + i] for i in range(min(m, values[0][2]))]
        if key["num"] < self.min_hits:
            return []
        for i in range(key["stat"], match_pos + 1):
            if not self.match(inp, i, key_tokens):
                continue
            begin, found = i + n, -1
            for v in range(MAX_VALUES):
                if values[v][0] == 0:
                    values[v] = [begin, 0, m]
                    found = v
                    break
                if all(inp[begin + j] == inp[values[v][0] + j] for j in range(m)):
                    found = v
                    break
            if found >= 0:
                values[found][1] = min(values[found][1] + 1, MAX_COUNT)
        key["stat"] = match_pos
        max_occur, slot_max = 0, 0
        for v in range(MAX_VALUES):
            if values[v][1] > max_occur:
                max_occur, slot_max = values[v][1], v
        sum_occur = sum(values[v][1] for v in range(MAX_VALUES) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return []
        self.last = (offset, slot_max)
        return [inp[match_pos + n + i] for i in range(min(m, values[slot_max][2]))]

    def accept(self, n_accepted: int) -> None:
        if self.last is not None:
            self.keys[self.last[0]]["values"][self.last[1]][2] = n_accepted


@pytest.mark.parametrize("key_only", [True, False], ids=["k", "k4v"])
@pytest.mark.parametrize("seed", range(12))
def test_proposals_and_statistics_are_b10621s(seed: int, key_only: bool) -> None:
    """Random token streams over a small alphabet (so that n-grams repeat with different continuations), three
    requests in one slot (the second prompt shorter, which makes ``begin`` forget), random acceptance."""
    rng = random.Random(seed)
    n, m, hits = rng.choice([(1, 2, 1), (2, 3, 2), (3, 4, 1), (2, 8, 3)])
    ours, oracle = NgramMap(NgramMapConfig(n, m, hits, key_only)), B10621(n, m, key_only, hits)
    alphabet = [rng.randrange(0, 70000) for _ in range(rng.choice([2, 3, 5]))]
    history: list[int] = []
    proposed = 0
    for request in range(3):
        keep = len(history) // 2 if request == 1 else len(history)  # a shorter prompt, then a longer one
        history = history[:keep] + [rng.choice(alphabet) for _ in range(rng.randrange(0, 40))]
        ours.begin(history)
        oracle.begin(history)
        for _ in range(50):
            sampled = rng.choice(alphabet)
            got, want = ours.propose(history, sampled), oracle.draft(history, sampled)
            assert got == want
            proposed += len(want)
            kept = rng.randrange(0, len(want) + 1)
            ours.accepted(kept)
            oracle.accept(kept)
            history += [sampled] + want[:kept]
        assert [(k.idx, k.stat_idx if not key_only else 0, k.num) for k in ours.keys] == \
            [(k["idx"], k["stat"] if not key_only else 0, k["num"]) for k in oracle.keys]
        assert ours.hashed == {h: i for h, i in enumerate(oracle.key_map) if i != 0}
    assert proposed > 0


def test_k_proposes_what_followed_and_at_most_what_was_accepted_last() -> None:
    text = list(range(100, 120))
    prompt = text + text[:3]
    ngram_map = NgramMap(NgramMapConfig(size_n=3, size_m=5, key_only=True))
    ngram_map.begin(prompt)
    assert ngram_map.propose(prompt, text[3]) == text[4:9]
    ngram_map.accepted(2)  # that key now proposes two tokens at most
    assert ngram_map.propose(prompt, text[3]) == text[4:6]
    assert ngram_map.peek(prompt, text[3]) and not ngram_map.peek(prompt, 5)


def test_k4v_waits_for_min_hits_and_a_clear_favourite() -> None:
    a, b, key = [1, 2], [3, 4], [7, 8]
    filler = list(range(100, 140))

    def lookups(*followers: list[int]) -> list[list[int]]:
        """Two lookups of the key in a prompt where ``followers`` followed it in turn."""
        ngram_map = NgramMap(NgramMapConfig(size_n=2, size_m=2, min_hits=2, key_only=False))
        history = [t for f in followers for t in filler + key + f] + filler + [key[0]]
        ngram_map.begin(history)
        return [ngram_map.propose(history, key[1]) for _ in range(2)]

    # The first lookup is below min_hits; then a, which followed three times against b's once, is proposed.
    assert lookups(a, b, a, a) == [[], a]
    assert lookups(a, b) == [[], []]  # once each: no clear favourite


@pytest.mark.parametrize("kind", ["ngram-map-k", "ngram-map-k4v"])
def test_greedy_output_is_unchanged_and_slots_keep_their_maps(tiny_model: Any, kind: str) -> None:
    """Four repetitive requests through two slots: each slot's map carries from one request to the next, proposals
    are verified in the batch, and greedy tokens are those of plain decoding."""
    texts = ["def f(x):\n    return x + 1\n" * 6, "one two three four " * 10, "abc" * 30, "The quick brown fox"]
    prompts = [list(tiny_model.tokenizer.encode(t)) for t in texts]
    plain, none = generate_greedy(tiny_model, prompts, 64, parallel=2)
    key = kind.replace("-", "_")[len("ngram_"):]
    sizes = {f"spec_ngram_{key}_size_n": 3, f"spec_ngram_{key}_size_m": 8, f"spec_ngram_{key}_min_hits": 1}
    spec, info = generate_greedy(tiny_model, prompts, 64, parallel=2, spec_type=[kind], **sizes)
    assert none is None and info is not None and info["type"] == kind
    assert (info[f"ngram_{key}_size_n"], info[f"ngram_{key}_size_m"]) == (3, 8)
    assert spec == plain
    assert info["n_drafted"] >= info["n_accepted"] > 0
