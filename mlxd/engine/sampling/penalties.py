"""Stages that edit logits from history: logit bias, repetition penalties and DRY, with their token windows.

The history stages keep state that ``accept`` feeds: llama-server replays the whole prompt into them before the
first sampled token, so their windows cover prompt tokens too.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from mlxd.engine.sampling.candidates import Candidates


def apply_logit_bias(cur: Candidates, bias: Mapping[int, float]) -> None:
    """Add each token's bias to its logit (``-inf`` bans it)."""
    if not bias:
        return
    ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
    values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
    at, present = cur.positions_of(ids)
    cur.own_logits()[at] += values[present]


class Penalties:
    """Repeat, frequency and presence penalties over the last ``last_n`` accepted tokens."""

    def __init__(self, last_n: int, repeat: float, frequency: float, presence: float) -> None:
        self.last_n = max(last_n, 0)
        self.repeat = repeat
        self.frequency = frequency
        self.presence = presence
        self.window: deque[int] = deque(maxlen=self.last_n or 1)
        self.counts: Counter[int] = Counter()

    @property
    def active(self) -> bool:
        return self.last_n != 0 and not (self.repeat == 1.0 and self.frequency == 0.0 and self.presence == 0.0)

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        if len(self.window) == self.last_n:
            old = self.window[0]
            self.counts[old] -= 1
            if self.counts[old] == 0:
                del self.counts[old]
        self.window.append(token)
        self.counts[token] += 1

    def edits(self) -> tuple[np.ndarray, np.ndarray]:
        """The penalised token ids and their counts in the window."""
        ids = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
        counts = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
        return ids, counts

    def penalise(self, logits: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """New logits for tokens seen ``counts`` times (the rule upstream applies, vectorised)."""
        rep = np.float32(self.repeat)
        out = np.where(logits <= 0, logits * rep, logits / rep).astype(np.float32)
        return out - (counts * np.float32(self.frequency) + np.float32(self.presence)).astype(np.float32)

    def apply(self, cur: Candidates) -> None:
        if not self.active:
            return
        cur.sorted = False
        if not self.counts:
            return
        ids, counts = self.edits()
        at, present = cur.positions_of(ids)
        cur.own_logits()[at] = self.penalise(cur.logits[at], counts[present])


# DRY limits from llama.cpp: breakers are cut to 40 characters and their tails to 20 tokens.
_MAX_BREAKER_CHARS = 40
_MAX_TAIL_TOKENS = 20
_FLOAT_MAX_LOG = 88.7228391


def process_breakers(pieces: Sequence[str], encode: Callable[[str], list[int]], breakers: Iterable[str]) -> dict[int, list[tuple[int, ...]]]:
    """Map each token that can start a breaker to the token tails that complete it.

    ``pieces[i]`` is the text of token i. A token containing a breaker is a breaker by itself (empty tail); a token
    ending with the start of a breaker gets the tokenisation of the rest of the breaker as its tail.
    """
    table: dict[int, list[tuple[int, ...]]] = {}
    for raw in breakers:
        if not raw:
            continue
        brk = raw[:_MAX_BREAKER_CHARS]
        for token_id, word in enumerate(pieces):
            if brk in word:
                table.setdefault(token_id, []).append(())
                continue
            pos = word.find(brk[0])
            while pos != -1:
                overlap = len(word) - pos
                if word[pos:] == brk[:overlap]:
                    tail = tuple(encode(brk[overlap:])[:_MAX_TAIL_TOKENS])
                    tails = table.setdefault(token_id, [])
                    if tail not in tails:
                        tails.append(tail)
                pos = word.find(brk[0], pos + 1)
    return table


class Dry:
    """DRY ("don't repeat yourself"): penalise tokens that would extend a sequence already seen in the window.

    Repeats are limited by the last sequence breaker; a token extending a repeat of length L >= allowed_length
    gets ``multiplier * base ** (L - allowed_length)`` subtracted from its logit.
    """

    def __init__(self, multiplier: float, base: float, allowed_length: int, penalty_last_n: int,
                 breakers: dict[int, list[tuple[int, ...]]], n_ctx_train: int) -> None:
        self.multiplier = multiplier
        self.base = base
        self.allowed_length = allowed_length
        self.n_ctx_train = n_ctx_train
        self.penalty_last_n = n_ctx_train if penalty_last_n == -1 else max(penalty_last_n, 0)
        self.enabled = multiplier != 0.0 and base >= 1.0 and penalty_last_n != 0
        self.breakers = breakers if self.enabled else {}
        self.window: deque[int] = deque(maxlen=self.penalty_last_n if self.enabled else 1)

    def accept(self, token: int) -> None:
        if self.enabled:
            self.window.append(token)

    def edits(self) -> dict[int, float]:
        """The penalty to subtract from each token's logit, given the current window."""
        if not self.enabled:
            return {}
        last_n = min(len(self.window), self.penalty_last_n, self.n_ctx_train)
        if last_n <= self.allowed_length:
            return {}
        seq = list(self.window)[-last_n:]
        rat = seq[::-1]  # rat[i] is the i-th token from the end

        rep_limit = last_n
        for i in range(last_n):
            tails = self.breakers.get(rat[i])
            if tails is None:
                continue
            longest = -1
            for tail in tails:
                n = len(tail)
                if longest < n <= i and all(tail[o] == rat[i - o - 1] for o in range(n)):
                    longest = n
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed_length:
            return {}

        repeat = self._suffix_repeats(rat, last_n, rep_limit)
        longest_for: dict[int, int] = {}
        for i in range(last_n - 1):
            length = repeat[i]
            if length >= self.allowed_length:
                token = rat[last_n - 2 - i]
                if longest_for.get(token, -1) < length:
                    longest_for[token] = length

        max_exponent = int(_FLOAT_MAX_LOG / math.log(self.base)) if self.base > 1.000001 else 0
        out: dict[int, float] = {}
        for token, length in longest_for.items():
            if () in self.breakers.get(token, ()):
                continue  # a single-token breaker is never penalised
            exponent = length - self.allowed_length
            if max_exponent > 0 and exponent > max_exponent:
                exponent = max_exponent
            out[token] = float(np.float32(self.multiplier * math.pow(self.base, exponent)))
        return out

    @staticmethod
    def _suffix_repeats(rat: list[int], last_n: int, rep_limit: int) -> list[int]:
        """For each position (oldest first), how long a run ending there matches the window's suffix.

        The reversed Z-algorithm of upstream, capped at ``rep_limit``.
        """
        last = last_n - 1
        counts = [0] * last_n
        lt = rt = 0
        for k in range(1, last_n):
            if k > rt:
                n = 0
                while n + k < last_n and rat[n] == rat[n + k]:
                    n += 1
                counts[last - k] = min(n, rep_limit)
                if n > 0:
                    lt, rt = k, k + n - 1
            else:
                p = k - lt
                right_part_len = rt - k + 1
                if counts[last - p] < right_part_len:
                    counts[last - k] = min(counts[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < last_n and rat[i] == rat[i - k]:
                        i += 1
                    counts[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        return counts

    def apply(self, cur: Candidates) -> None:
        penalties = self.edits()
        if not penalties:
            return
        ids = np.fromiter(penalties.keys(), dtype=np.int64, count=len(penalties))
        values = np.fromiter(penalties.values(), dtype=np.float32, count=len(penalties))
        at, present = cur.positions_of(ids)
        cur.own_logits()[at] -= values[present]
        cur.sorted = False
