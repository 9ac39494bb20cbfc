"""``--spec-type ngram-map-k`` and ``ngram-map-k4v``: b10621's common_ngram_map, one per slot.

Like ngram-simple, a lookup of the last ``size_n`` tokens in the slot's own history, proposing up to ``size_m``
tokens that followed an earlier occurrence; unlike it, the slot keeps what it learnt from step to step and from
one request to the next (b10621 keeps one map per slot and only forgets what a shorter new prompt cut off):

- a hash of every n-gram old enough to be followed by a whole m-gram (a sparse stand-in for b10621's 2^18-entry
  array; the first index stored for a hash wins, and a hit is checked against the tokens, as collisions occur);
- per key n-gram looked up: ``ngram-map-k`` proposes the m-gram after the match, at most as many tokens as the
  target accepted last time after that key; ``ngram-map-k4v`` counts the (up to four) different m-grams that have
  followed the key and proposes the most frequent one only once the key has been seen ``min_hits`` times and that
  m-gram is at least twice as frequent as the others together.

Every loop bound and index below is b10621's, so that a slot proposes what llama-server's would after the same
tokens (tests/engine/test_ngram_map.py replays its loops scalar by scalar).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

MAX_VALUES = 4  # m-grams counted per key (COMMON_NGRAM_MAX_VALUES)
MAX_COUNT = 16380  # counts saturate here (COMMON_NGRAM_MAX_VALUE_COUNT)
HASH_SIZE = 262144  # the hash's range (COMMON_NGRAM_HASH_MAP_SIZE)
_LCG = 2654435761
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class NgramMapConfig:
    """``--spec-ngram-map-k-*`` (``key_only``) or ``--spec-ngram-map-k4v-*``."""

    size_n: int = 12
    size_m: int = 48
    min_hits: int = 1
    key_only: bool = True


@dataclass
class _Value:
    idx: int = 0  # where the m-gram starts in the history (0: an empty slot)
    num: int = 0  # times it followed the key
    n_accepted: int = -1  # tokens the target accepted the last time it was proposed


@dataclass
class _Key:
    idx: int  # where the key n-gram starts in the history
    values: list[_Value]
    stat_idx: int = 0  # history scanned for the values up to here
    num: int = 0  # times the key was looked up and found


def _hashes(tokens: list[int], starts: list[int], n: int) -> list[int]:
    """b10621's hash of the n-gram at each of ``starts`` (32-bit LCG steps), reduced to the map's range."""
    if not starts:
        return []
    lo, hi = min(starts), max(starts) + n  # only the tokens these n-grams span, not the whole history
    at = np.asarray(starts, dtype=np.int64)[:, None] - lo + np.arange(n)
    grams = np.asarray(tokens[lo:hi], dtype=np.uint64)[at]
    h = np.zeros(len(starts), dtype=np.uint64)
    for j in range(n):  # below 2^64 before the mask: a 32-bit hash times a 32-bit factor, plus a token
        h = (h * np.uint64(_LCG) + grams[:, j]) & np.uint64(_U32)
    return (h % np.uint64(HASH_SIZE)).tolist()


def _same(tokens: list[int], at: int, pattern: list[int]) -> bool:
    return tokens[at:at + len(pattern)] == pattern


@dataclass
class NgramMap:
    """One slot's map of key n-grams to the m-grams after them."""

    cfg: NgramMapConfig
    keys: list[_Key] = field(default_factory=list)
    hashed: dict[int, int] = field(default_factory=dict)  # hash -> index of an n-gram with it
    hashed_up_to: int = 0  # n-grams at indices above this are hashed (key_map_last_idx)
    size_last_begin: int = 0  # history length when the current request's generation began
    idx_last_check: int = 0  # history length at the last lookup
    last: tuple[int, int] | None = None  # (key, value) of the last proposal made

    def begin(self, prompt: list[int]) -> None:
        """A request's generation starts after ``prompt``: forget what lay beyond a shorter new history."""
        n, m = self.cfg.size_n, self.cfg.size_m
        size = len(prompt)
        cleanup = self.size_last_begin
        if cleanup > size:
            cleanup = size - n - m if size > n + m else 0
        if size < self.idx_last_check:
            self.hashed = {h: i for h, i in self.hashed.items() if i < cleanup}
            self.hashed_up_to = cleanup - 1 if cleanup > 0 else 0
            for i in range(len(self.keys) - 1, -1, -1):
                key = self.keys[i]
                if key.idx >= cleanup:
                    del self.keys[i]
                    continue
                if self.cfg.key_only:
                    continue
                for j in range(MAX_VALUES - 1, -1, -1):
                    if key.values[j].idx != 0 and key.values[j].idx >= cleanup:
                        del key.values[j]
                        key.values.append(_Value())
                if key.values[0].idx == 0:
                    del self.keys[i]
        self.idx_last_check = size
        self.size_last_begin = size

    def propose(self, history: list[int], sampled: int) -> list[int]:
        """The m-gram to verify after ``sampled`` (``history``: the tokens before it), or none."""
        self.last = None
        n, m = self.cfg.size_n, self.cfg.size_m
        length = len(history)
        if length < 2 * n + m:
            return []
        self.idx_last_check = length
        pattern = history[length - n + 1:] + [sampled]
        match = self._find(history, pattern, length)
        self._hash_new(history, length)
        if match == 0:
            return []
        offset = next((i for i, k in enumerate(self.keys) if _same(history, k.idx, pattern)), len(self.keys))
        if offset == len(self.keys):
            self.keys.append(_Key(match, [_Value(n_accepted=m) for _ in range(MAX_VALUES)]))
        key = self.keys[offset]
        key.num = min(key.num + 1, MAX_COUNT)
        if self.cfg.key_only:
            chosen = 0
        else:
            if key.num < self.cfg.min_hits:
                return []
            self._count_values(history, pattern, key, match)
            nums = [v.num for v in key.values]
            chosen = max(range(MAX_VALUES), key=lambda v: (nums[v], -v))  # the first of the most frequent
            others = sum(nums) - nums[chosen]
            if others > 0 and nums[chosen] < 2 * others:
                return []
        take = min(m, key.values[chosen].n_accepted)
        self.last = (offset, chosen)
        return history[match + n:match + n + max(take, 0)]

    def peek(self, history: list[int], sampled: int) -> bool:
        """Whether ``propose`` would find the key (it may still propose nothing); changes nothing."""
        n, m = self.cfg.size_n, self.cfg.size_m
        return len(history) >= 2 * n + m and self._find(history, history[len(history) - n + 1:] + [sampled],
                                                        len(history)) != 0

    def accepted(self, n_accepted: int) -> None:
        """How many of the last proposal's tokens the target accepted: the most that key proposes next time."""
        if self.last is not None:
            key, value = self.last
            self.keys[key].values[value].n_accepted = n_accepted

    def _find(self, history: list[int], pattern: list[int], length: int) -> int:
        """The newest earlier occurrence of ``pattern`` that a whole m-gram follows (0: none), as b10621 looks:
        the hash first, then the request's prompt, then what it generated, each newest first down to what is
        hashed."""
        n, m = self.cfg.size_n, self.cfg.size_m
        at = self.hashed.get(_hashes(pattern, [0], n)[0], 0)
        if at != 0 and at < length - n - m - 1 and _same(history, at, pattern):
            return at
        found = 0
        if self.size_last_begin > n + m + 1:
            found = newest(history, pattern, self.size_last_begin - n - m - 1, self.hashed_up_to)
        return found or newest(history, pattern, length - n - m - 1, max(self.size_last_begin, self.hashed_up_to))

    def _hash_new(self, history: list[int], length: int) -> None:
        """Hash the n-grams that have become old enough since the last lookup (in ``_find``'s order; the first
        index stored for a hash stays)."""
        n, m = self.cfg.size_n, self.cfg.size_m
        starts: list[int] = []
        if self.size_last_begin > n + m + 1:
            starts += range(self.size_last_begin - n - m - 1, self.hashed_up_to, -1)
        starts += range(length - n - m - 1, max(self.size_last_begin, self.hashed_up_to), -1)
        for h, j in zip(_hashes(history, starts, n), starts):
            self.hashed.setdefault(h, j)
        self.hashed_up_to = max(length - n - m - 1, self.hashed_up_to)

    def _count_values(self, history: list[int], pattern: list[int], key: _Key, match: int) -> None:
        """Count the m-grams after each occurrence of the key from where the last count stopped up to ``match``."""
        n, m = self.cfg.size_n, self.cfg.size_m
        for i in _occurrences(history, pattern, key.stat_idx, match):
            start = i + n
            for v in key.values:
                if v.idx == 0:  # a new m-gram after the key
                    v.idx, v.num, v.n_accepted = start, 0, m
                elif history[start:start + m] != history[v.idx:v.idx + m]:
                    continue
                v.num = min(v.num + 1, MAX_COUNT)
                break
        key.stat_idx = match


def newest(history: list[int], pattern: list[int], hi: int, lo: int) -> int:
    """The largest ``j`` with ``lo < j <= hi`` where ``pattern`` starts in ``history`` (0: none); ngram-simple's
    search too (engine.speculative.ngram_draft)."""
    if hi <= lo:
        return 0
    # A byte search of that window alone runs at C speed: each token is 4 bytes, and only 4-aligned hits are matches.
    buf, pat = array("I", history[lo + 1:hi + len(pattern)]).tobytes(), array("I", pattern).tobytes()
    at = buf.rfind(pat)
    while at > 0 and at % 4:
        at = buf.rfind(pat, 0, at + len(pat) - 1)
    return lo + 1 + at // 4 if at >= 0 and at % 4 == 0 else 0


def _occurrences(history: list[int], pattern: list[int], first: int, last: int) -> list[int]:
    """Where ``pattern`` starts in ``history`` from ``first`` to ``last`` (both included), in order."""
    buf, pat = array("I", history[first:last + len(pattern)]).tobytes(), array("I", pattern).tobytes()
    found, at = [], buf.find(pat)
    while at >= 0:
        if at % 4 == 0:
            found.append(first + at // 4)
        at = buf.find(pat, at + 1)
    return found
