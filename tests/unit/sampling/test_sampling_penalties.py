"""Logit bias, repetition penalties and DRY, with their windows and the default sequence breakers."""

from __future__ import annotations

import numpy as np
import pytest

from mlxd.engine.sampling.candidates import Candidates
from mlxd.engine.sampling.params import DEFAULT_DRY_BREAKERS
from mlxd.engine.sampling.penalties import Dry, Penalties, apply_logit_bias, process_breakers


def test_logit_bias_adds_and_bans():
    cur = Candidates.from_logits(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    apply_logit_bias(cur, {0: 1.5, 2: -np.inf, 7: 5.0})  # ids outside the candidates are ignored
    assert cur.logits.tolist() == [2.5, 2.0, -np.inf]


def test_logit_bias_on_reordered_candidates():
    cur = Candidates.from_logits(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    cur.take(np.array([2, 0]))
    apply_logit_bias(cur, {0: 10.0, 1: 10.0})
    assert cur.ids.tolist() == [2, 0] and cur.logits.tolist() == [3.0, 11.0]


def test_penalties_formula():
    pen = Penalties(last_n=64, repeat=2.0, frequency=0.5, presence=0.25)
    for t in (0, 1, 1):
        pen.accept(t)
    cur = Candidates.from_logits(np.array([2.0, -2.0, 1.0, 0.0], dtype=np.float32))
    pen.apply(cur)
    # token 0 seen once: 2/2 - (0.5 + 0.25); token 1 seen twice and negative: -2*2 - (1.0 + 0.25)
    assert cur.logits.tolist() == [0.25, -5.25, 1.0, 0.0]


def test_penalties_window_slides():
    pen = Penalties(last_n=2, repeat=2.0, frequency=0.0, presence=0.0)
    for t in (0, 1, 1):
        pen.accept(t)
    cur = Candidates.from_logits(np.array([2.0, 2.0], dtype=np.float32))
    pen.apply(cur)
    assert cur.logits.tolist() == [2.0, 1.0]


def test_penalties_disabled_by_neutral_values():
    pen = Penalties(last_n=64, repeat=1.0, frequency=0.0, presence=0.0)
    pen.accept(0)
    assert not pen.active


def ids(vocab, text: str) -> list[int]:
    return [vocab.id(ch) for ch in text.split()]


def make_dry(vocab, breakers=DEFAULT_DRY_BREAKERS, allowed=2, last_n=64) -> Dry:
    table = process_breakers(vocab.pieces, vocab.encode, breakers)
    return Dry(0.8, 1.75, allowed, last_n, table, n_ctx_train=4096)


def test_default_breakers_table(vocab):
    table = process_breakers(vocab.pieces, vocab.encode, DEFAULT_DRY_BREAKERS)
    # tokens containing a breaker are breakers by themselves
    for piece in (":", "\n", '"', "*", "x:"):
        assert table[vocab.id(piece)] == [()]
    assert vocab.id("a") not in table


def test_multi_token_breaker_tail(vocab):
    table = process_breakers(vocab.pieces, vocab.encode, ["xy"])
    assert table[vocab.id("x")] == [(vocab.id("y"),)]
    assert vocab.id("x:") not in table


def test_dry_penalises_tokens_extending_repeats(vocab):
    # llama.cpp's example "a b c c b c y a b c": continuing with c repeats "a b c c" (3 -> 4), y repeats "b c y"
    dry = make_dry(vocab)
    for t in ids(vocab, "a b c c b c y a b c"):
        dry.accept(t)
    edits = dry.edits()
    assert edits == {vocab.id("c"): pytest.approx(0.8 * 1.75), vocab.id("y"): pytest.approx(0.8)}
    cur = Candidates.from_logits(np.zeros(vocab.n_vocab, dtype=np.float32))
    dry.apply(cur)
    assert cur.logits[vocab.id("c")] == pytest.approx(-1.4) and cur.logits[vocab.id("b")] == 0.0


def test_dry_breaker_limits_repeat(vocab):
    plain = make_dry(vocab)
    for t in ids(vocab, "a x b a x b"):
        plain.accept(t)
    assert plain.edits() == {vocab.id("a"): pytest.approx(0.8 * 1.75)}
    broken = make_dry(vocab)
    for t in ids(vocab, "a : b a : b"):  # ':' is a default breaker: the repeat cannot cross it
        broken.accept(t)
    assert broken.edits() == {}


def test_dry_never_penalises_single_token_breakers(vocab):
    dry = make_dry(vocab)
    for t in ids(vocab, "a b : a b"):
        dry.accept(t)
    assert vocab.id(":") not in dry.edits()


def test_dry_window_and_allowed_length(vocab):
    short = make_dry(vocab, last_n=3)
    for t in ids(vocab, "a b c a b"):
        short.accept(t)
    assert short.edits() == {}  # the first "a b" fell out of the window
    lenient = make_dry(vocab, allowed=3)
    for t in ids(vocab, "a b c a b"):
        lenient.accept(t)
    assert lenient.edits() == {}
