"""Draft-free proposals from a hashed n-gram table (``--spec-type ngram-mod``), as b10621's ``common_ngram_mod``.

One table per model, shared by every sequence: ``n_match`` tokens hash (a 64-bit polynomial, modulo the table's
4M entries) to the token that followed them last. A sequence's prompt goes into the table when its first proposal
is asked for, and its own tokens in chunks of 32 as it grows. A proposal starts from the last ``n_match - 1``
tokens and the token just sampled, and follows the table one token at a time, up to ``n_max`` tokens; a chain
that breaks before ``n_min`` tokens proposes nothing. The table is emptied when a prompt leaves it more than a
quarter full, and when one sequence's proposals are mostly refused (under a quarter accepted) five times running.
Collisions only cost refused proposals: the target verifies them as it verifies any draft.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZE = 4 * 1024 * 1024  # entries, as b10621's
EMPTY = -1
MUL = 6364136223846793005  # b10621's hash multiplier
MASK = (1 << 64) - 1
CHUNK = 32  # a sequence's new tokens go into the table once this many have gathered
FULL = 0.25  # share of used entries past which a new prompt empties the table
LOW = 0.25  # acceptance under which a verification counts as low
LOW_STREAK = 5  # low verifications in a row that empty the table


@dataclass(frozen=True)
class NgramModConfig:
    """``--spec-ngram-mod-n-match``, ``--spec-ngram-mod-n-min`` and ``--spec-ngram-mod-n-max``."""

    n_match: int = 24
    n_min: int = 48
    n_max: int = 64


@dataclass
class SequenceState:
    """What the table keeps of one sequence (b10621's ``seq_info``)."""

    i_last: int = 0  # the history up to here is in the table
    n_draft_last: int = 0  # tokens of its last proposal
    n_low: int = 0  # low verifications in a row


class NgramMod:
    """The table and its lookups; every method runs on the model worker's thread."""

    def __init__(self, cfg: NgramModConfig, size: int = SIZE) -> None:
        self.cfg = cfg
        self.entries = np.full(size, EMPTY, dtype=np.int32)
        self.used = 0
        self._top = pow(MUL, cfg.n_match - 1, 1 << 64)  # the oldest token's factor, for the rolling hash

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.used = 0

    def _add(self, tokens: list[int], start: int, stop: int) -> None:
        """Each window ``tokens[i : i + n]`` for ``start <= i < stop`` maps to ``tokens[i + n]``; a later window
        overwrites an earlier one with the same hash, as the upstream loop does."""
        n = self.cfg.n_match
        if stop <= start:
            return
        seq = np.asarray(tokens[start : stop + n], dtype=np.uint64)
        windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)[: stop - start]
        with np.errstate(over="ignore"):  # the hash is modulo 2^64, as size_t arithmetic
            h = np.zeros(stop - start, dtype=np.uint64)
            for j in range(n):
                h = h * np.uint64(MUL) + windows[:, j]
        index = (h % np.uint64(len(self.entries))).astype(np.int64)
        values = np.asarray(tokens[start + n : stop + n], dtype=np.int32)
        # The last window of each index wins: keep each index's last occurrence.
        last = len(index) - 1 - np.unique(index[::-1], return_index=True)[1]
        index, values = index[last], values[last]
        self.used += int(np.count_nonzero(self.entries[index] == EMPTY))
        self.entries[index] = values

    def _hash(self, window: list[int]) -> int:
        h = 0
        for t in window:
            h = (h * MUL + t) & MASK
        return h

    def begin(self, state: SequenceState, prompt: list[int]) -> None:
        """A new sequence: its prompt into the table (b10621's ``begin``), and the table emptied when that leaves
        it more than a quarter full."""
        state.i_last, state.n_draft_last = 0, 0
        n = self.cfg.n_match
        if len(prompt) < n:
            return
        self._add(prompt, 0, len(prompt) - n)
        state.i_last = len(prompt) - n
        if self.used > FULL * len(self.entries):
            self.reset()

    def propose(self, state: SequenceState, history: list[int], sampled: int, limit: int) -> list[int]:
        """Up to ``min(n_max, limit)`` tokens to verify after ``sampled`` (``history``: the tokens before it)."""
        cfg, n = self.cfg, self.cfg.n_match
        state.n_draft_last = 0
        if len(history) < n:
            return []
        if state.i_last + CHUNK < len(history):
            self._add(history, state.i_last, len(history) - n)
            state.i_last = len(history) - n
        window = history[len(history) - n + 1 :] + [sampled]
        h, size = self._hash(window), len(self.entries)
        out: list[int] = []
        for i in range(cfg.n_max):
            token = int(self.entries[h % size])
            if token == EMPTY:
                if i < cfg.n_min:
                    return []
                break
            out.append(token)
            h = ((h - window[i] * self._top) * MUL + token) & MASK  # the window moves on by this token
            window.append(token)
        state.n_draft_last = len(out)
        return out[:limit]

    def accepted(self, state: SequenceState, n_accepted: int) -> None:
        """How many of the sequence's last proposals the target kept (b10621's ``accept``)."""
        if state.n_draft_last <= 0:
            return
        if n_accepted / state.n_draft_last < LOW:
            state.n_low += 1
            if state.n_low >= LOW_STREAK:
                self.reset()
                state.n_low, state.i_last = 0, 0
        else:
            state.n_low = 0
