"""Draft-free proposals for speculative decoding (``--spec-type ngram-simple``, ``ngram-mod``).

``ngram-simple`` looks in the sequence's own history (``propose`` below); ``ngram-mod`` in a table of every
sequence's n-grams (engine.ngram_mod). ``Lookups`` asks them in b10621's order of preference.

As b10621's ngram-simple: the last ``size_n`` tokens (the token just sampled last) are looked up in the earlier
history, newest match first, and up to ``size_m`` tokens that followed that match are proposed, provided at least
``size_n`` of them exist. Text that repeats itself (code being edited, a quoted document, a list) gets long
proposals for free; other text gets none, and its step is a plain decode step. The target verifies proposals as
it verifies a draft model's, so greedy output is unchanged and sampling keeps its distribution.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

from mlxd.engine.ngram_mod import NgramMod, SequenceState


@dataclass(frozen=True)
class NgramConfig:
    """``--spec-ngram-simple-size-n`` / ``--spec-ngram-simple-size-m``."""

    size_n: int = 12
    size_m: int = 48


def propose(history: list[int], sampled: int, cfg: NgramConfig, limit: int) -> list[int]:
    """Up to ``min(cfg.size_m, limit)`` tokens to verify after ``sampled``, from ``history`` (the tokens before it)."""
    n, m = cfg.size_n, cfg.size_m
    length = len(history)
    if length <= n + m + 1 or limit <= 0:
        return []
    # The byte search finds the pattern at C speed: each token is 4 bytes, and only 4-aligned hits are matches.
    buf = array("I", history).tobytes()
    pattern = array("I", history[length - n + 1:] + [sampled]).tobytes()
    # b10621 looks at windows starting at 1 .. length - n - 1, newest first (not the current one, not position 0).
    end = 4 * (length - 1)
    found = buf.rfind(pattern, 4, end)
    while found > 0 and found % 4:
        end = found + len(pattern) - 1
        found = buf.rfind(pattern, 4, end)
    if found <= 0:
        return []
    start = found // 4 + n
    take = min(m, length - start)
    if take < n:
        return []
    return history[start:start + min(take, limit)]


@dataclass
class Lookups:
    """The draft-free types of ``--spec-type`` a model serves, asked in b10621's order: ngram-simple, then
    ngram-mod (a row that neither serves may still use the draft model)."""

    simple: NgramConfig | None = None
    mod: NgramMod | None = None

    def propose(self, seq: Any, limit: int) -> tuple[list[int], bool]:
        """Proposals to verify after the sequence's last token (up to ``limit``), and whether ngram-mod made
        them."""
        tokens = seq.all_tokens
        if not tokens:
            return [], False
        history, sampled = tokens[:-1], tokens[-1]
        if self.simple is not None:
            found = propose(history, sampled, self.simple, limit)
            if found:
                return found, False
        if self.mod is not None and limit > 0:
            if seq.ngram_state is None:  # the sequence's first proposal: its prompt goes into the table
                seq.ngram_state = SequenceState()
                self.mod.begin(seq.ngram_state, seq.prompt)
            return self.mod.propose(seq.ngram_state, history, sampled, limit), True
        return [], False

    def accepted(self, seq: Any, n_accepted: int) -> None:
        """The verification of proposals ngram-mod made for ``seq``."""
        if self.mod is not None and seq.ngram_state is not None:
            self.mod.accepted(seq.ngram_state, n_accepted)
