"""The infill stage against hand-computed distributions."""

from __future__ import annotations

import numpy as np
import pytest

from mlxd.engine.sampling.candidates import Candidates
from mlxd.engine.sampling.infill import Infill


def candidates(vocab, probs: dict[str, float]) -> Candidates:
    logits = np.full(vocab.n_vocab, -np.inf, dtype=np.float32)
    for piece, p in probs.items():
        logits[vocab.id(piece)] = np.log(p)
    cur = Candidates.from_logits(logits)
    cur.take(np.array([vocab.id(piece) for piece in probs]))  # only these survive earlier stages
    return cur


def test_prefix_tokens_merge_then_weak_ones_go(vocab):
    cur = candidates(vocab, {"hello": 0.45, "he": 0.25, "llo": 0.25, "</s>": 0.05})
    Infill(vocab.pieces, vocab.eog_ids).apply(cur)
    # "he" is a prefix of "hello": merged into it (0.7). Round one (0.2) keeps hello, llo and the end token;
    # round two (1/3, two text tokens left) drops llo.
    assert [vocab.pieces[i] for i in cur.ids] == ["hello", "</s>"]
    assert cur.p.tolist() == pytest.approx([0.7 / 0.75, 0.05 / 0.75], rel=1e-5)


def test_end_of_generation_mass_wins(vocab):
    cur = candidates(vocab, {"a": 0.5, "b": 0.3, "</s>": 0.2})
    Infill(vocab.pieces, vocab.eog_ids).apply(cur)  # 3 * 0.2 * 3 > 0.8
    assert cur.ids.tolist() == [0] and cur.p.tolist() == [1.0]


def test_no_text_token_left_collapses_to_end(vocab):
    text = ["a", "b", "c", "y", ":", "\n", '"', "*", " "]
    cur = candidates(vocab, {t: 0.11 for t in text} | {"</s>": 0.01})
    Infill(vocab.pieces, vocab.eog_ids).apply(cur)
    assert cur.ids.tolist() == [0] and cur.logits.tolist() == [1.0]
