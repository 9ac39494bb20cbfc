"""llama.cpp's infill sampler: for fill-in-the-middle, merge tokens that share a prefix and prefer ending.

If end-of-generation tokens hold enough mass, only they remain. Otherwise a token whose text is a prefix of
another's absorbs (or is absorbed by) it, weak tokens are dropped in two rounds, and when no text token survives
the candidates collapse to the end-of-text token.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from mlxd.engine.sampling.candidates import Candidates, softmax


class Infill:
    """The infill stage over a vocabulary's token texts and end-of-generation ids."""

    def __init__(self, pieces: Sequence[str], eog_ids: Sequence[int]) -> None:
        self.pieces = pieces
        self.eog = frozenset(int(t) for t in eog_ids)
        # The token that ends an infill: upstream's end-of-text token, else end-of-sequence.
        self.end_token = int(eog_ids[0]) if eog_ids else -1

    def apply(self, cur: Candidates) -> None:
        softmax(cur, do_sort=True)
        ids = cur.ids.copy()
        logits = cur.logits.copy()
        p = cur.p.astype(np.float32).copy()
        is_eog = np.array([int(t) in self.eog for t in ids], dtype=bool)
        p_eog = np.float32(p[is_eog].sum(dtype=np.float32))
        p_txt = np.float32(p[~is_eog].sum(dtype=np.float32))
        if np.float32(3.0) * p_eog * np.float32(len(ids)) > p_txt:
            keep = np.nonzero(is_eog)[0]
            cur.replace(ids[keep], logits[keep], (p[keep] / p[keep].sum(dtype=np.float32)).astype(np.float32))
            return

        self._merge_prefixes(ids, logits, p)

        keep, n_text = self._threshold(p, is_eog, np.float32(0.2))
        if n_text == 0:
            first = int(keep[0]) if keep.size else 0
            cur.replace(np.array([self.end_token]), np.array([1.0], dtype=np.float32), p[first:first + 1])
            return
        p_kept = (p[keep] / p[keep].sum(dtype=np.float32)).astype(np.float32)
        # Second round among the survivors, with a threshold set by how many text tokens survived.
        ok = (p_kept >= np.float32(1.0 / (n_text + 1))) | is_eog[keep]
        final = keep[ok]
        cur.replace(ids[final], logits[final], (p_kept[ok] / p_kept[ok].sum(dtype=np.float32)).astype(np.float32))

    def _merge_prefixes(self, ids: np.ndarray, logits: np.ndarray, p: np.ndarray) -> None:
        """Merge every pair where one token's text is a prefix of the other's, in upstream's pair order."""
        texts = [self.pieces[int(t)] if 0 <= int(t) < len(self.pieces) else "" for t in ids]
        by_text = sorted(range(len(texts)), key=lambda i: texts[i])
        sorted_texts = [texts[i] for i in by_text]
        for i0, text0 in enumerate(texts):
            if not text0:
                continue
            lo = bisect.bisect_left(sorted_texts, text0)
            hi = bisect.bisect_left(sorted_texts, text0 + "\U0010ffff")
            partners = sorted(by_text[k] for k in range(lo, hi) if by_text[k] != i0)
            for i1 in partners:
                if logits[i0] == -np.inf:
                    break
                if logits[i1] == -np.inf:
                    continue
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] += p[src]
                logits[src] = -np.inf
                p[src] = 0.0

    @staticmethod
    def _threshold(p: np.ndarray, is_eog: np.ndarray, thold: np.float32) -> tuple[np.ndarray, int]:
        """Positions of tokens at or above ``thold`` (end-of-generation tokens always stay), and how many are text."""
        kept = np.nonzero((p >= thold) | is_eog)[0]
        return kept, int((~is_eog[kept]).sum())
