"""Each truncating stage against a hand-computed distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxd.engine.sampling.candidates import Candidates, Mt19937
from mlxd.engine.sampling.truncation import min_p, top_k, top_n_sigma, top_p, typical, xtc


def cands(values: list[float], *, probs: bool = False) -> Candidates:
    logits = np.log(np.array(values, dtype=np.float64)) if probs else np.array(values)
    return Candidates.from_logits(logits.astype(np.float32))


class FixedDraw(Mt19937):
    """A generator whose uniform draws are given, to pin the stochastic branch under test."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def uniform_float(self) -> float:
        return self.value


def test_top_k_keeps_highest_sorted():
    cur = cands([1, 3, 2, 5, 4])
    top_k(cur, 2)
    assert cur.ids.tolist() == [3, 4] and cur.sorted


def test_top_k_non_positive_and_oversized():
    cur = cands([1, 3, 2])
    top_k(cur, 0)
    assert cur.ids.tolist() == [0, 1, 2] and not cur.sorted
    top_k(cur, 10)
    assert cur.ids.tolist() == [1, 2, 0]


@pytest.mark.parametrize(("p", "min_keep", "kept"), [(0.65, 0, [1, 3]), (0.75, 0, [1, 3, 2]), (0.3, 3, [1, 3, 2]),
                                                     (1.0, 0, [0, 1, 2, 3])])
def test_top_p(p, min_keep, kept):
    # probabilities 0.1 0.4 0.2 0.3: sorted mass 0.4, 0.7, 0.9, 1.0
    cur = cands([0.1, 0.4, 0.2, 0.3], probs=True)
    top_p(cur, p, min_keep)
    assert cur.ids.tolist() == kept


def test_min_p_unsorted_keeps_order():
    # 0.25 of the top probability 0.5 is 0.125: 0.1 goes, 0.15 stays; unsorted input keeps its order
    cur = cands([0.15, 0.5, 0.1, 0.25], probs=True)
    min_p(cur, 0.25, 0)
    assert cur.ids.tolist() == [0, 1, 3] and not cur.sorted


def test_min_p_min_keep_falls_back_to_sorted():
    cur = cands([0.15, 0.5, 0.1, 0.25], probs=True)
    min_p(cur, 0.9, 2)
    assert cur.ids.tolist() == [1, 3]


@pytest.mark.parametrize(("p", "min_keep", "kept"), [(0.5, 0, [1, 0]), (0.2, 0, [1]), (0.2, 3, [1, 0, 2])])
def test_typical(p, min_keep, kept):
    # p = 1/2 1/4 1/8 1/8: entropy 1.75 ln2; |surprisal - entropy| = ln2 * (0.75, 0.25, 1.25, 1.25)
    cur = cands([0.5, 0.25, 0.125, 0.125], probs=True)
    typical(cur, p, min_keep)
    assert cur.ids.tolist() == kept and not cur.sorted


def test_top_n_sigma_masks_and_normalises():
    # logits 3 1 0 -2: mean 0.5, std sqrt(3.25); 1.5 sigma below the max is 0.296
    cur = cands([3, 1, 0, -2, -np.inf])
    top_n_sigma(cur, 1.5)
    assert cur.ids[:2].tolist() == [0, 1]
    assert np.isneginf(cur.logits[2:]).all()
    assert cur.p[:2] == pytest.approx([1 / (1 + math.exp(-2)), math.exp(-2) / (1 + math.exp(-2))], rel=1e-6)
    assert cur.p[2:].tolist() == [0, 0, 0]


def test_top_n_sigma_disabled():
    cur = cands([3, 1, 0])
    top_n_sigma(cur, -1.0)
    assert cur.logits.tolist() == [3, 1, 0]


@pytest.mark.parametrize(("threshold", "min_keep", "draw", "kept"), [
    (0.25, 0, 0.0, [1, 2, 3]),  # 0.4 and 0.3 reach it: all but the last of them go
    (0.05, 0, 0.0, [3]),
    (0.25, 4, 0.0, [0, 1, 2, 3]),  # would leave 3 < min_keep
    (0.25, 0, 0.9, [0, 1, 2, 3]),  # the coin says no
    (0.6, 0, 0.0, [0, 1, 2, 3]),  # thresholds above 0.5 disable XTC
])
def test_xtc(threshold, min_keep, draw, kept):
    cur = cands([0.4, 0.3, 0.2, 0.1], probs=True)
    xtc(cur, 0.5, threshold, min_keep, FixedDraw(draw))
    assert cur.ids.tolist() == kept
