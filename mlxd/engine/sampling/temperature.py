"""Temperature, dynamic temperature (entropy-scaled) and the final draws: dist and mirostat v1/v2."""

from __future__ import annotations

import math

import numpy as np

from mlxd.engine.sampling.candidates import Candidates, Mt19937, softmax
from mlxd.engine.sampling.truncation import top_k


def _float(value: float) -> np.float32:
    """``value`` as upstream's C++ float holds it: past float32's range, an infinity (numpy warns; C++ does not)."""
    with np.errstate(over="ignore"):
        return np.float32(value)


def is_greedy_temperature(temp: float, delta: float) -> bool:
    """Whether the temperature stage leaves a single finite logit (what ``temperature <= 0`` means upstream)."""
    if delta > 0.0:
        return bool(_float(temp + delta) <= 0.0)
    return bool(_float(temp) <= 0.0)


def scale(cur: Candidates, temp: float) -> None:
    """Divide logits by ``temp``; ``temp <= 0`` keeps only the first maximum and sets the rest to -inf.

    Upstream holds the temperature as a float, so a positive value too small for float32 is 0 and greedy. One
    small enough for the division to overflow divides the logits' distance to the maximum instead: the same
    distribution (a constant shift), with the maxima finite and the rest going to -inf, never inf or nan.
    """
    t = _float(temp)
    if t <= 0.0:
        keep = int(np.argmax(cur.logits))  # first occurrence, as upstream's strict '>' scan
        top = cur.logits[keep]
        cur.logits = np.full_like(cur.logits, -np.inf)
        cur.logits[keep] = top
        return
    with np.errstate(over="ignore"):
        scaled = (cur.logits / t).astype(np.float32)
        finite = np.isfinite(cur.logits)
        if finite.any() and not np.isfinite(scaled[finite]).all():
            scaled = ((cur.logits - cur.logits[finite].max()) / t).astype(np.float32)
    cur.logits = scaled


def temperature_ext(cur: Candidates, temp: float, delta: float, exponent: float) -> None:
    """llama.cpp's ``temp-ext``: plain temperature, or with ``delta > 0`` a temperature in [temp-delta, temp+delta]
    chosen by the normalised entropy of the current distribution raised to ``exponent``."""
    if delta <= 0.0:
        scale(cur, temp)
        return
    if cur.size <= 1:
        return
    min_temp = max(0.0, temp - delta)
    max_temp = temp + delta
    max_entropy = -math.log(1.0 / cur.size)
    softmax(cur, do_sort=True)
    probs = cur.p[cur.p > 0]
    entropy = float(-np.sum(probs * np.log(probs, dtype=np.float32), dtype=np.float32))
    normalized = entropy / max_entropy
    dyn_temp = min_temp + (max_temp - min_temp) * math.pow(normalized, exponent)
    scale(cur, dyn_temp)
    # Probabilities are refreshed in double precision after the rescale, as upstream does.
    shifted = cur.logits.astype(np.float64) - float(cur.logits[0])
    e = np.exp(shifted)
    cur.p = (e / e.sum()).astype(np.float32)


def dist(cur: Candidates, rng: Mt19937) -> None:
    """The final draw: softmax over the candidates and one uniform draw walked along their current order."""
    if cur.size == 0:
        cur.selected = -1
        return
    cur.selected = 0
    if cur.size == 1:
        cur.p = np.ones(1, dtype=np.float32)
        return
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    e = np.exp(cur.logits - max_l, dtype=np.float32)
    run = np.cumsum(e.astype(np.float64))
    total = float(run[-1])
    target = total * rng.uniform_double()
    hit = int(np.searchsorted(run, target, side="left"))
    cur.selected = min(hit, cur.size - 1)
    cur.p = (e / total).astype(np.float32)


class Mirostat:
    """Mirostat 1.0: estimate the Zipf exponent from the top ``m`` tokens, pick k to aim at surprise ``tau``."""

    def __init__(self, n_vocab: int, tau: float, eta: float, rng: Mt19937, m: int = 100) -> None:
        self.n_vocab = n_vocab
        self.tau = tau
        self.eta = eta
        self.m = m
        self.rng = rng
        self.mu = 2.0 * tau

    def apply(self, cur: Candidates) -> None:
        softmax(cur, do_sort=True)
        n = min(self.m - 1, cur.size - 1)
        probs = cur.p.astype(np.float32)
        sum_ti_bi = np.float32(0.0)
        sum_ti_sq = np.float32(0.0)
        for i in range(n):
            t_i = np.float32(math.log((i + 2) / (i + 1)))
            with np.errstate(divide="ignore", invalid="ignore"):
                b_i = np.float32(np.log(probs[i] / probs[i + 1]))
            sum_ti_bi += t_i * b_i
            sum_ti_sq += t_i * t_i
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s_hat = float(sum_ti_bi / sum_ti_sq)
            epsilon_hat = s_hat - 1.0
            try:
                k = math.pow((epsilon_hat * math.pow(2.0, self.mu)) / (1.0 - math.pow(self.n_vocab, -epsilon_hat)),
                             1.0 / s_hat)
            except (ValueError, ZeroDivisionError, OverflowError):
                k = float("nan")
        k_int = int(k) if math.isfinite(k) else cur.size
        top_k(cur, max(min(k_int, cur.size), 1))
        softmax(cur, do_sort=True)
        _select_and_learn(self, cur)


class MirostatV2:
    """Mirostat 2.0: drop tokens whose surprise exceeds ``mu``, draw, and move ``mu`` towards ``tau``."""

    def __init__(self, tau: float, eta: float, rng: Mt19937) -> None:
        self.tau = tau
        self.eta = eta
        self.rng = rng
        self.mu = 2.0 * tau

    def apply(self, cur: Candidates) -> None:
        softmax(cur, do_sort=True)
        with np.errstate(divide="ignore"):
            surprise = -np.log2(cur.p)
        over = np.nonzero(surprise > self.mu)[0]
        cur.truncate(max(int(over[0]) if over.size else cur.size, 1))
        softmax(cur, do_sort=True)
        _select_and_learn(self, cur)


def _select_and_learn(state: Mirostat | MirostatV2, cur: Candidates) -> None:
    idx = state.rng.discrete(cur.p)
    cur.selected = idx
    observed = -math.log2(float(cur.p[idx])) if cur.p[idx] > 0 else math.inf
    state.mu = float(np.float32(state.mu - state.eta * (observed - state.tau)))


class AdaptiveP:
    """adaptive-p: reshape the distribution to favour tokens near a target probability, then draw.

    The target adapts so that the average original probability of the chosen tokens (an exponential moving
    average with ``decay``) tends to ``target``. A negative target just draws from the distribution as it is.
    """

    # Shape of the transform: a peak logit at the target, quadratic near it and linear in the tails.
    WIDTH = np.float32(0.3)
    PEAK = np.float32(5.0)
    SHARPNESS = np.float32(10.0)

    def __init__(self, target: float, decay: float, rng: Mt19937) -> None:
        self.target = np.float32(target)
        self.decay = np.float32(min(max(decay, 0.0), 0.99))
        self.rng = rng
        self.weighted_sum = np.float32(self.target / (np.float32(1.0) - self.decay))
        self.total_weight = np.float32(np.float32(1.0) / (np.float32(1.0) - self.decay))
        self._pending: tuple[int, float] | None = None  # (token, its original probability)

    def apply(self, cur: Candidates) -> None:
        softmax(cur, do_sort=False)
        if self.target < 0:
            cur.selected = self.rng.discrete(cur.p)
            return
        original = cur.p.copy()
        target = np.float32(min(max(float(self.target), 0.0), 1.0))
        if self.total_weight == 0:
            adapted = target
        else:
            adapted = np.float32(2.0) * target - self.weighted_sum / self.total_weight
        adapted = np.float32(min(max(float(adapted), 0.0), 1.0))
        dist_ = np.abs((cur.p - adapted) * (np.float32(1.0) / self.WIDTH)).astype(np.float32)
        shaped = (self.PEAK - self.SHARPNESS * dist_ * dist_ / (np.float32(1.0) + dist_)).astype(np.float32)
        # Tokens already masked to -inf stay masked.
        cur.logits = np.where(cur.logits == -np.inf, cur.logits, shaped).astype(np.float32)
        softmax(cur, do_sort=False)
        idx = self.rng.discrete(cur.p)
        cur.selected = idx
        self._pending = (int(cur.ids[idx]), float(original[idx]))

    def accept(self, token: int) -> None:
        """Fold the original probability of the token this stage picked into the moving average."""
        if self._pending is not None and self._pending[0] == token:
            p = np.float32(self._pending[1])
            self.weighted_sum = np.float32(p + self.decay * self.weighted_sum)
            self.total_weight = np.float32(np.float32(1.0) + self.decay * self.total_weight)
        self._pending = None
