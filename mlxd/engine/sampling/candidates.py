"""The candidate list every sampler stage reads and rewrites, and the random source they draw from.

This mirrors llama.cpp's ``llama_token_data_array``: parallel arrays of token ids, logits and probabilities, a
``sorted`` flag (descending by logit) and the index of the selected token. Stages may shrink or reorder it; the
order matters because the final draw walks the candidates in their current order.
"""

from __future__ import annotations

import math
import os
import numpy as np

# 0xFFFFFFFF: llama.cpp's LLAMA_DEFAULT_SEED, which asks for a fresh random seed.
DEFAULT_SEED = 0xFFFFFFFF


class Candidates:
    """Token ids with their logits and (when computed) probabilities, in the order the chain left them.

    A fresh set is the whole vocabulary in id order; its ids and probabilities are materialised only when a
    stage needs them, and its logits are copied only when a stage edits them in place, because most steps cut
    a 150k-entry vocabulary down to a few dozen tokens first.
    """

    def __init__(self, logits: np.ndarray, ids: np.ndarray | None = None, p: np.ndarray | None = None,
                 *, owned: bool = True) -> None:
        self.logits = logits  # float32
        self._ids = ids  # int64; None while the candidates are the full vocabulary in id order
        self._p = p  # float32; stale until a stage computes it, as upstream
        self._owned = owned
        self.sorted = False
        self.selected = -1

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> Candidates:
        """The full vocabulary in id order, as llama.cpp starts every sampling step (``logits`` is not modified)."""
        row = np.asarray(logits, dtype=np.float32).reshape(-1)
        return cls(row, owned=row is not logits and row.base is None)

    @property
    def identity(self) -> bool:
        """Whether the candidates are still the full vocabulary in id order (an id is its own position)."""
        return self._ids is None

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            return np.arange(self.logits.shape[0], dtype=np.int64)
        return self._ids

    @property
    def p(self) -> np.ndarray:
        if self._p is None:
            self._p = np.zeros_like(self.logits)
        return self._p

    @p.setter
    def p(self, value: np.ndarray) -> None:
        self._p = value

    @property
    def size(self) -> int:
        return int(self.logits.shape[0])

    def own_logits(self) -> np.ndarray:
        """The logits, copied first if they still belong to the caller; for stages that edit in place."""
        if not self._owned:
            self.logits = self.logits.copy()
            self._owned = True
        return self.logits

    def take(self, index: np.ndarray | slice) -> None:
        """Keep (and reorder to) the given positions."""
        if self._ids is None:
            self._ids = np.arange(self.size, dtype=np.int64)[index] if isinstance(index, slice) \
                else np.asarray(index, dtype=np.int64)
        else:
            self._ids = self._ids[index]
        self.logits = self.logits[index]
        self._owned = not isinstance(index, slice) or self._owned
        if self._p is not None:
            self._p = self._p[index]

    def replace(self, ids: np.ndarray, logits: np.ndarray, p: np.ndarray) -> None:
        """Swap in a new candidate list (the sorted flag is left as it was, as upstream stages do)."""
        self._ids = np.asarray(ids, dtype=np.int64)
        self.logits = np.asarray(logits, dtype=np.float32)
        self._p = np.asarray(p, dtype=np.float32)
        self._owned = True

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` candidates."""
        if size < self.size:
            self.take(slice(0, size))

    def positions_of(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``token_ids`` among the candidates: (positions, which of token_ids are present)."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        if self._ids is None:
            present = (token_ids >= 0) & (token_ids < self.size)
            return token_ids[present], present
        order = np.argsort(self._ids, kind="stable")
        sorted_ids = self._ids[order]
        if not self.size:
            return order[:0], np.zeros(token_ids.shape, dtype=bool)
        at = np.searchsorted(sorted_ids, token_ids)
        at_clipped = np.minimum(at, self.size - 1)
        present = (at < self.size) & (sorted_ids[at_clipped] == token_ids)
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
        # Seeded on first draw: a greedy request never draws, and seeding costs as much as a decode step here.
        self._state: np.random.RandomState | None = None

    def next_u32(self) -> int:
        if self._state is None:
            self._state = np.random.RandomState(self.seed)
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
        return min(int(np.searchsorted(cp, u, side="left")), len(cp) - 1)


def random_seed() -> int:
    """A fresh seed for LLAMA_DEFAULT_SEED, like ``std::random_device``."""
    return int.from_bytes(os.urandom(4), "little")


def resolve_seed(seed: int) -> int:
    """The seed a sampler actually uses: ``seed`` itself, or a random one for LLAMA_DEFAULT_SEED."""
    seed &= 0xFFFFFFFF
    return random_seed() if seed == DEFAULT_SEED else seed
