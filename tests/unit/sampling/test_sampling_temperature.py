"""Temperature, dynamic temperature, the final draw, mirostat, and the generator they share with llama.cpp."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from mlxd.engine.sampling.candidates import Candidates, Mt19937
from mlxd.engine.sampling.temperature import (
    AdaptiveP,
    Mirostat,
    MirostatV2,
    dist,
    is_greedy_temperature,
    scale,
    temperature_ext,
)


class FixedRng(Mt19937):
    """Draws given in advance: uniform doubles for dist, indices for mirostat's discrete draw."""

    def __init__(self, doubles: list[float] = (), index: int = 0) -> None:
        super().__init__(0)
        self.doubles = list(doubles)
        self.index = index

    def uniform_double(self) -> float:
        return self.doubles.pop(0)

    def discrete(self, p: np.ndarray) -> int:
        return self.index


def cands(values, *, probs=False) -> Candidates:
    logits = np.log(np.array(values, dtype=np.float64)) if probs else np.array(values, dtype=np.float64)
    return Candidates.from_logits(logits.astype(np.float32))


def test_mt19937_matches_the_cpp_standard():
    # std::mt19937 default seed 5489: first output, and the 10000th that the C++ standard requires.
    rng = Mt19937(5489)
    first = rng.next_u32()
    for _ in range(9998):
        rng.next_u32()
    assert (first, rng.next_u32()) == (3499211612, 4123659995)


def test_uniform_double_uses_two_words_low_first():
    a, b = Mt19937(7), Mt19937(7)
    lo, hi = a.next_u32(), a.next_u32()
    assert b.uniform_double() == (lo + hi * 2.0**32) / 2.0**64


def test_scale_and_greedy_temperature():
    cur = cands([1.0, 2.0, 2.0, 0.5])
    scale(cur, 0.5)
    assert cur.logits.tolist() == [2.0, 4.0, 4.0, 1.0]
    scale(cur, 0.0)  # keeps the first maximum only
    assert cur.logits.tolist() == [-np.inf, 4.0, -np.inf, -np.inf]


@pytest.mark.parametrize(("temp", "delta", "greedy"), [(0.0, 0.0, True), (0.8, 0.0, False), (0.0, 0.5, False),
                                                       (-1.0, 0.5, True)])
def test_is_greedy_temperature(temp, delta, greedy):
    assert is_greedy_temperature(temp, delta) is greedy


def test_dynamic_temperature_follows_entropy():
    # p = 1/4 3/4: entropy over ln 2 picks a temperature between 0.5 and 1.5
    cur = cands([0.25, 0.75], probs=True)
    temperature_ext(cur, 1.0, 0.5, 1.0)
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    t = 0.5 + 1.0 * (entropy / math.log(2))
    assert cur.ids.tolist() == [1, 0]
    assert cur.logits[0] - cur.logits[1] == pytest.approx(math.log(3) / t, rel=1e-5)
    q = 1 / (1 + math.exp(-math.log(3) / t))
    assert cur.p.tolist() == pytest.approx([q, 1 - q], rel=1e-5)


def test_dynamic_temperature_exponent_zero_is_max_temp():
    cur = cands([0.25, 0.75], probs=True)
    temperature_ext(cur, 1.0, 0.5, 0.0)
    assert cur.logits[0] - cur.logits[1] == pytest.approx(math.log(3) / 1.5, rel=1e-5)


@pytest.mark.parametrize(("u", "index"), [(0.1, 0), (0.6, 1), (0.95, 2)])
def test_dist_walks_candidates_in_order(u, index):
    cur = cands([0.5, 0.3, 0.2], probs=True)
    dist(cur, FixedRng([u]))
    assert cur.selected == index
    assert cur.p.tolist() == pytest.approx([0.5, 0.3, 0.2], rel=1e-6)


def test_dist_single_candidate_draws_nothing():
    cur = cands([1.0])
    rng = FixedRng([])
    dist(cur, rng)  # would fail on an empty draw list
    assert cur.selected == 0 and cur.p.tolist() == [1.0]


def test_mirostat_v2_truncates_by_surprise_and_learns():
    # surprise in bits: 1, 2, 3, 3; tau 1 gives mu 2, so two tokens survive, renormalised to 2/3 and 1/3
    cur = cands([0.5, 0.25, 0.125, 0.125], probs=True)
    m = MirostatV2(tau=1.0, eta=0.1, rng=FixedRng(index=1))
    m.apply(cur)
    assert cur.ids.tolist() == [0, 1] and cur.selected == 1
    assert cur.p.tolist() == pytest.approx([2 / 3, 1 / 3], rel=1e-6)
    assert m.mu == pytest.approx(2.0 - 0.1 * (math.log2(3) - 1.0), rel=1e-6)


def test_mirostat_v1_estimates_zipf_exponent():
    # p_i ~ 1/(i+1)^2 is Zipf with s = 2: k = (1 * 2^mu / (1 - 10^-1))^(1/2) = 2.98 for mu = 3 -> top 2
    weights = np.array([1 / (i + 1) ** 2 for i in range(10)])
    cur = cands(weights / weights.sum(), probs=True)
    m = Mirostat(n_vocab=10, tau=1.5, eta=0.1, rng=FixedRng(index=0))
    m.apply(cur)
    assert cur.ids.tolist() == [0, 1] and cur.selected == 0
    p0 = 1.0 / (1.0 + 0.25)
    assert m.mu == pytest.approx(3.0 - 0.1 * (-math.log2(p0) - 1.5), rel=1e-5)


def test_adaptive_p_reshapes_around_the_adapted_target():
    # decay 0.9 starts the average at target: adapted target 2*0.5 - 0.5 = 0.5
    # distance to it in widths of 0.3: 0, 2/3, 1 -> logits 5 - 10 d^2/(1+d) = 5, 7/3, 0
    cur = cands([0.5, 0.3, 0.2], probs=True)
    ap = AdaptiveP(target=0.5, decay=0.9, rng=FixedRng(index=1))
    ap.apply(cur)
    assert cur.logits.tolist() == pytest.approx([5.0, 7 / 3, 0.0], rel=1e-5)
    assert cur.selected == 1
    ap.accept(1)  # the chosen token's original probability 0.3 enters the moving average
    assert float(ap.weighted_sum) == pytest.approx(0.3 + 0.9 * 5.0, rel=1e-6)
    assert float(ap.total_weight) == pytest.approx(1.0 + 0.9 * 10.0, rel=1e-6)
    ap.accept(2)  # a token it did not pick leaves the average alone
    assert float(ap.weighted_sum) == pytest.approx(4.8, rel=1e-6)


def test_adaptive_p_negative_target_draws_as_is():
    cur = cands([0.5, 0.3, 0.2], probs=True)
    AdaptiveP(target=-1.0, decay=0.9, rng=FixedRng(index=2)).apply(cur)
    assert cur.selected == 2 and cur.logits.tolist() == pytest.approx(np.log([0.5, 0.3, 0.2]).tolist(), rel=1e-6)


def test_a_temperature_below_float32_is_greedy_without_warnings() -> None:
    # upstream reads the temperature into a float: 1e-50 is 0 there, so greedy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert is_greedy_temperature(1e-50, 0.0) and not is_greedy_temperature(1e-30, 0.0)
        cur = cands([1.0, 3.0, 2.0, 3.0])
        scale(cur, 1e-50)
    assert cur.logits.tolist() == [-math.inf, 3.0, -math.inf, -math.inf]


@pytest.mark.parametrize("temp", [1e-30, 1e-38, 1e-44])
def test_a_tiny_positive_temperature_gives_finite_probabilities(temp: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cur = cands([1.0, 3.0, 2.0, 3.0, -math.inf])
        scale(cur, temp)
        rng = FixedRng(doubles=[0.75])
        dist(cur, rng)
    assert not np.isnan(cur.logits).any() and not np.isposinf(cur.logits).any()
    # the limit of a vanishing temperature: the maxima share the mass, the rest get none
    assert cur.p.tolist() == [0.0, 0.5, 0.0, 0.5, 0.0]
    assert cur.selected == 3


def test_a_temperature_past_float32_is_an_infinity_without_a_warning() -> None:
    """Upstream holds the temperature as a C++ float: 1e300 is +inf there, a sampling temperature, not greedy."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not is_greedy_temperature(1e300, 0.0) and is_greedy_temperature(-1e300, 0.0)
        cur = Candidates.from_logits(np.array([1.0, 3.0, 2.0], np.float32))
        scale(cur, 1e300)
        assert np.array_equal(cur.logits, np.zeros(3, np.float32))  # each logit over +inf: a uniform draw
