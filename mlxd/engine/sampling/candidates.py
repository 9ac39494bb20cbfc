"""The candidate list every sampler stage reads and rewrites, and the random source they draw from.

This mirrors llama.cpp's ``llama_token_data_array``: parallel arrays of token ids, logits and probabilities, a
``sorted`` flag (descending by logit) and the index of the selected token. Stages may shrink or reorder it; the
order matters because the final draw walks the candidates in their current order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# 0xFFFFFFFF: llama.cpp's LLAMA_DEFAULT_SEED, which asks for a fresh random seed.
DEFAULT_SEED = 0xFFFFFFFF


@dataclass
class Candidates:
    """Token ids with their logits and (when computed) probabilities, in the order the chain left them."""

    ids: np.ndarray  # int64
    logits: np.ndarray  # float32
    p: np.ndarray  # float32; stale until a stage computes it, as upstream
    sorted: bool = False
    selected: int = -1
    # True while ids == arange(n_vocab) in order, so an id is its own position.
    identity: bool = False

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> Candidates:
        """The full vocabulary in id order, as llama.cpp starts every sampling step."""
        row = np.asarray(logits, dtype=np.float32).reshape(-1).copy()
        return cls(
            ids=np.arange(row.shape[0], dtype=np.int64),
            logits=row,
            p=np.zeros_like(row),
            identity=True,
        )

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    def take(self, index: np.ndarray | slice) -> None:
        """Keep (and reorder to) the given positions."""
        self.ids = self.ids[index]
        self.logits = self.logits[index]
        self.p = self.p[index]
        self.identity = False

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` candidates."""
        if size < self.size:
            self.take(slice(0, size))

    def positions_of(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``token_ids`` among the candidates: (positions, which of token_ids are present)."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        if self.identity:
            present = (token_ids >= 0) & (token_ids < self.size)
            return token_ids[present], present
        order = np.argsort(self.ids, kind="stable")
        sorted_ids = self.ids[order]
        at = np.searchsorted(sorted_ids, token_ids)
        at_clipped = np.minimum(at, max(self.size - 1, 0))
        present = (at < self.size) & (sorted_ids[at_clipped] == token_ids) if self.size else np.zeros_like(at, bool)
        return order[at_clipped[present]], present


def sort_descending(cur: Candidates) -> None:
    """Sort by logit, highest first; ties keep their current order so results are deterministic."""
    if not cur.sorted:
        cur.take(np.argsort(-cur.logits, kind="stable"))
        cur.sorted = True


def softmax(cur: Candidates, do_sort: bool) -> None:
    """llama.cpp's softmax stage: optional sort, then float32 probabilities over the current candidates."""
    if do_sort:
        sort_descending(cur)
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(cur.logits - max_l, dtype=np.float32)
    total = np.float32(e.sum(dtype=np.float32))
    cur.p = (e / total).astype(np.float32)


class Mt19937:
    """A std::mt19937 stream with libstdc++'s ``generate_canonical``, so a seed draws what llama.cpp draws.

    numpy's legacy ``RandomState`` seeds MT19937 exactly as ``std::mt19937(seed)`` does, and a full-range uint32
    draw returns the raw 32-bit output.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed & 0xFFFFFFFF
        self._state = np.random.RandomState(self.seed)

    def next_u32(self) -> int:
        return int(self._state.randint(0, 1 << 32, dtype=np.uint64))

    def uniform_double(self) -> float:
        """``std::uniform_real_distribution<double>(0, 1)``: two 32-bit words, low word first."""
        lo = self.next_u32()
        hi = self.next_u32()
        r = (lo + hi * 4294967296.0) / 18446744073709551616.0
        return r if r < 1.0 else math.nextafter(1.0, 0.0)

    def uniform_float(self) -> float:
        """``std::uniform_real_distribution<float>(0, 1)``: one 32-bit word, rounded to float."""
        r = np.float32(np.float32(self.next_u32()) / np.float32(4294967296.0))
        return float(r) if r < 1.0 else float(np.nextafter(np.float32(1.0), np.float32(0.0)))

    def discrete(self, p: np.ndarray) -> int:
        """``std::discrete_distribution<int>`` over weights ``p`` (libstdc++: normalised cumulative, lower_bound)."""
        w = np.asarray(p, dtype=np.float64)
        total = w.sum()
        if not total > 0:
            return 0
        cp = np.cumsum(w / total)
        cp[-1] = 1.0
        u = self.uniform_double()
        return int(min(np.searchsorted(cp, u, side="left"), len(cp) - 1))


def random_seed() -> int:
    """A fresh seed for LLAMA_DEFAULT_SEED, like ``std::random_device``."""
    return int.from_bytes(np.random.default_rng().bytes(4), "little")


def resolve_seed(seed: int) -> int:
    """The seed a sampler actually uses: ``seed`` itself, or a random one for LLAMA_DEFAULT_SEED."""
    seed &= 0xFFFFFFFF
    return random_seed() if seed == DEFAULT_SEED else seed
