"""``--spec-type ngram-cache``: b10621's lookup decoding from n-gram statistics (common_ngram_cache).

Three caches map an n-gram of 1 to 4 tokens to the counts of the tokens that followed it:

- the context cache, one per slot, fed with the slot's tokens as they come (b10621 keeps it from request to
  request, and adds only n-grams within the tokens new since the last lookup);
- the dynamic cache (``--lookup-cache-dynamic``) and the static cache (``--lookup-cache-static``): files in
  llama.cpp's format, made by its ``llama-lookup-create`` from a corpus, read once at load and never written (as
  b10621's server, which does not save them).

A proposal grows one token at a time, up to eight (b10621's fixed draft length): the longest n-gram of the context
cache whose most frequent follower is frequent and certain enough wins (each follower's count weighted by how
often the static cache saw it after the last two tokens), then the dynamic cache's under stricter thresholds, then
the static cache's own. Followers tied in weight go by first seen, where b10621 goes by its hash map's iteration
order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlxd.errors import EngineError

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2  # LLAMA_NGRAM_MIN / _MAX / _STATIC
N_DRAFT = 8  # b10621's ngram-cache proposes up to 8 tokens (not an option there)
NULL = -1  # LLAMA_TOKEN_NULL: the padding of an n-gram shorter than NGRAM_MAX

# The fewest samples and the least share of the most frequent follower, by n-gram size (1 to 4), for the context
# cache (lax) and the dynamic one (strict); the static cache alone uses the lax pair of size NGRAM_STATIC.
LAX_SAMPLES, LAX_PERCENT = (2, 2, 1, 1), (66, 50, 50, 50)
STRICT_SAMPLES, STRICT_PERCENT = (4, 3, 2, 2), (75, 66, 66, 66)

Ngram = tuple[int, ...]  # NGRAM_MAX token ids, NULL-padded
Cache = dict[Ngram, dict[int, int]]  # n-gram -> follower -> count


def ngram(tokens: list[int]) -> Ngram:
    return tuple(tokens) + (NULL,) * (NGRAM_MAX - len(tokens))


def update(cache: Cache, tokens: list[int], n_new: int) -> None:
    """Count, for each n-gram size, the follower of every n-gram ending among the last ``n_new`` tokens."""
    for size in range(NGRAM_MIN, NGRAM_MAX + 1):
        for i in range(max(len(tokens) - n_new, size), len(tokens)):
            part = cache.setdefault(ngram(tokens[i - size:i]), {})
            part[tokens[i]] = part.get(tokens[i], 0) + 1


def draft(tokens: list[int], n_draft: int, context: Cache, dynamic: Cache, static: Cache) -> list[int]:
    """Up to ``n_draft`` tokens to follow ``tokens`` (the history and the token just sampled)."""
    if len(tokens) < NGRAM_STATIC:
        return []
    seq = list(tokens[-NGRAM_MAX:])  # the n-grams looked up end with the last tokens, drafted ones included
    out: list[int] = []
    while len(out) < n_draft:
        part_static = static.get(ngram(seq[-NGRAM_STATIC:]), {})
        # NULL where the history is shorter than the n-gram (b10621 reads before its buffer there).
        grams = [ngram([NULL] * max(0, size - len(seq)) + seq[-size:]) for size in range(NGRAM_MIN, NGRAM_MAX + 1)]
        token = _weighted(context, grams, part_static, LAX_SAMPLES, LAX_PERCENT)
        if token == NULL:
            token = _weighted(dynamic, grams, part_static, STRICT_SAMPLES, STRICT_PERCENT)
        if token == NULL:
            token = _static(static.get(ngram(seq[-NGRAM_STATIC:])))
        if token == NULL:
            break
        out.append(token)
        seq.append(token)
    return out


def _weighted(cache: Cache, grams: list[Ngram], part_static: dict[int, int], samples: tuple[int, ...],
              percent: tuple[int, ...]) -> int:
    """The follower of the longest n-gram in ``cache`` that is seen often and surely enough, each follower's count
    weighted by 100 times the static cache's count for it (1 where it has none); NULL if none is."""
    for i in range(len(grams) - 1, -1, -1):
        part = cache.get(grams[i])
        if part is None:
            continue
        best, best_count, best_weight, total = NULL, 0, 0, 0
        for token, count in part.items():
            weight = 100 * part_static[token] if token in part_static else 1
            if count * weight > best_count * best_weight:
                best, best_count, best_weight = token, count, weight
            total += count
        if total < samples[i] or 100 * best_count < percent[i] * total:
            continue
        return best
    return NULL


def _static(part: dict[int, int] | None) -> int:
    """The static cache's own most frequent follower, under the lax thresholds of its n-gram size."""
    if part is None:
        return NULL
    best, best_count, total = NULL, 0, 0
    for token, count in part.items():
        if count > best_count:
            best, best_count = token, count
        total += count
    if total < LAX_SAMPLES[NGRAM_STATIC - 1] or 100 * best_count < LAX_PERCENT[NGRAM_STATIC - 1] * total:
        return NULL
    return best


def load(path: str | Path) -> Cache:
    """A cache file in llama.cpp's format: per n-gram, its NGRAM_MAX int32 tokens, an int32 count of followers,
    then that many (int32 token, int32 count) pairs, all little-endian."""
    try:
        words = np.fromfile(path, dtype="<i4")
    except OSError as exc:
        raise EngineError(f"cannot read the lookup cache {path}: {exc.strerror or exc}") from exc
    cache: Cache = {}
    i, n = 0, len(words)
    while i < n:
        if i + NGRAM_MAX + 1 > n:
            raise EngineError(f"the lookup cache {path} is truncated (an n-gram without its followers at word {i})")
        key = tuple(int(t) for t in words[i:i + NGRAM_MAX])
        count = int(words[i + NGRAM_MAX])
        start, end = i + NGRAM_MAX + 1, i + NGRAM_MAX + 1 + 2 * count
        if count <= 0 or end > n:
            raise EngineError(f"the lookup cache {path} is not in llama.cpp's format (word {i})")
        pairs = words[start:end].reshape(count, 2)
        if (pairs[:, 1] <= 0).any():
            raise EngineError(f"the lookup cache {path} holds a count below 1 (word {i})")
        cache[key] = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))
        i = end
    return cache


def save(cache: Cache, path: str | Path) -> None:
    """``cache`` in llama.cpp's file format (what ``llama-lookup-create`` writes)."""
    words: list[int] = []
    for key, part in cache.items():
        words += [*key, len(part)]
        for token, count in part.items():
            words += [token, count]
    np.asarray(words, dtype="<i4").tofile(path)


@dataclass
class _SlotContext:
    cache: Cache = field(default_factory=dict)
    size: int = 0  # tokens of the slot's history the cache has seen (b10621's cache_size)


@dataclass
class NgramCaches:
    """The static and dynamic caches of a model and each slot's context cache."""

    static: Cache = field(default_factory=dict)
    dynamic: Cache = field(default_factory=dict)
    _slots: dict[int, _SlotContext] = field(default_factory=dict)

    def propose(self, slot_id: int, history: list[int], sampled: int) -> list[int]:
        """Up to N_DRAFT tokens to verify after ``sampled`` (``history``: the slot's tokens before it)."""
        return draft(history[-NGRAM_MAX:] + [sampled], N_DRAFT, self._context(slot_id, history, sampled),
                     self.dynamic, self.static)

    def peek(self, slot_id: int, history: list[int], sampled: int) -> bool:
        """Whether a proposal would start; it feeds the slot's context cache as a lookup does, which b10621 does
        at every step, so that the cache does not wait for a first proposal to learn."""
        return bool(draft(history[-NGRAM_MAX:] + [sampled], 1, self._context(slot_id, history, sampled),
                          self.dynamic, self.static))

    def _context(self, slot_id: int, history: list[int], sampled: int) -> Cache:
        """The slot's context cache, fed as b10621 feeds it: the n-grams within the tokens new since it last was."""
        ctx = self._slots.setdefault(slot_id, _SlotContext())
        if ctx.size < len(history) + 1:
            new = history[ctx.size:] + [sampled]
            update(ctx.cache, new, len(new))
            ctx.size = len(history) + 1
        return ctx.cache
