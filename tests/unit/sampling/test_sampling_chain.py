"""The whole chain: order, seeded draws, mirostat, probability reports, and the batched step."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxd.engine.sampling import SamplingParams, TokenSampler, sample_batch
from mlxd.engine.sampling.candidates import Mt19937

PROBS = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))


def report(params: SamplingParams, logits=PROBS) -> list[tuple[int, float]]:
    out = TokenSampler(params).sample(logits)
    return [(c.id, c.prob) for c in out.probs]


def test_order_of_stages_matters():
    # min_p 0.5 keeps p >= 0.25 (two tokens); a temperature of 0.25 first sharpens the top token past it
    base = dict(min_p=0.5, temperature=0.25, n_probs=3, post_sampling_probs=True, seed=1)
    min_p_first = report(SamplingParams(samplers=("min_p", "temperature"), **base))
    temp_first = report(SamplingParams(samplers=("temperature", "min_p"), **base))
    w = np.array([0.5**4, 0.3**4])
    assert [i for i, _ in min_p_first] == [0, 1]
    assert [p for _, p in min_p_first] == pytest.approx((w / w.sum()).tolist(), rel=1e-5)
    assert temp_first == [(0, 1.0)]


def test_seeded_draw_is_the_hand_computed_one():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32))
    for seed in (1, 2, 3, 42, 1234):
        u = Mt19937(seed).uniform_double()
        expected = int(np.searchsorted(np.cumsum([0.1, 0.2, 0.3, 0.4]), u))
        assert TokenSampler(SamplingParams(samplers=(), seed=seed)).sample(logits).id == expected


def draws(params: SamplingParams, n: int = 40) -> list[int]:
    rng = np.random.default_rng(0)
    s = TokenSampler(params)
    out = []
    for _ in range(n):
        token = s.sample(rng.normal(size=200).astype(np.float32)).id
        s.accept(token)
        out.append(token)
    return out


def test_seeded_sampling_is_reproducible():
    params = SamplingParams(seed=123, repeat_penalty=1.3, xtc_probability=0.5, top_k=0, dry_multiplier=0.0)
    assert draws(params) == draws(params)
    assert draws(params) != draws(params.model_copy(update={"seed": 124}))


def test_default_seed_is_random_per_sampler():
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert TokenSampler(params).seed != TokenSampler(params).seed or draws(params) != draws(params)


def test_greedy_still_applies_bias_and_penalties():
    logits = np.array([5.0, 4.0, 3.0, 0.0], dtype=np.float32)
    params = SamplingParams(temperature=0.0, repeat_penalty=2.0, logit_bias={1: -10.0})
    s = TokenSampler(params, prompt_tokens=[0])  # the prompt feeds the penalty window
    assert s.is_greedy
    assert s.sample(logits).id == 2  # 0 is penalised to 2.5, 1 biased away


def test_mirostat_replaces_the_chain():
    logits = np.array([5.0, 4.0, 3.0], dtype=np.float32)
    params = SamplingParams(temperature=0.0, repeat_penalty=100.0, mirostat=2, seed=3)
    assert TokenSampler(params, prompt_tokens=[0]).sample(logits).id == 0  # no penalties under mirostat
    assert TokenSampler(params.model_copy(update={"mirostat": 0}), prompt_tokens=[0]).sample(logits).id == 1


def test_pre_sampling_report_is_the_raw_distribution():
    params = SamplingParams(temperature=0.0, n_probs=2, logit_bias={0: -np.inf})
    out = TokenSampler(params).sample(PROBS)
    assert out.id == 1
    assert [(c.id, round(c.prob, 5)) for c in out.probs] == [(0, 0.5), (1, 0.3)]
    assert out.prob == pytest.approx(0.3, rel=1e-5)


def test_post_sampling_report_drops_zero_probabilities():
    params = SamplingParams(temperature=0.0, n_probs=3, post_sampling_probs=True)
    out = TokenSampler(params).sample(PROBS)
    assert (out.id, out.prob, [(c.id, c.prob) for c in out.probs]) == (0, 1.0, [(0, 1.0)])


def test_ignore_eos_bans_end_of_generation(vocab):
    logits = np.zeros(vocab.n_vocab, dtype=np.float32)
    logits[0] = 10.0
    s = TokenSampler(SamplingParams(temperature=0.0, ignore_eos=True), vocab)
    assert s.sample(logits).id != 0


def test_dry_in_the_chain_needs_and_uses_the_vocabulary(vocab):
    params = SamplingParams(temperature=0.0, dry_multiplier=10.0)
    prompt = [vocab.id(t) for t in "a x b a x".split()]
    logits = np.zeros(vocab.n_vocab, dtype=np.float32)
    logits[vocab.id("b")] = 1.0
    assert TokenSampler(params, vocab, prompt_tokens=prompt).sample(logits).id != vocab.id("b")
    with pytest.raises(ValueError):
        TokenSampler(params)


def test_adaptive_p_replaces_the_final_draw():
    params = SamplingParams(samplers=("adaptive_p",), adaptive_target=0.5, seed=5)
    a, b = TokenSampler(params), TokenSampler(params)
    logits = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    for _ in range(5):
        ta, tb = a.sample(logits).id, b.sample(logits).id
        assert ta == tb
        a.accept(ta)
        b.accept(tb)
    assert a.adaptive is not None and not a.is_greedy


def test_batch_greedy_rows_equal_the_chain(vocab):
    rng = np.random.default_rng(7)
    v = vocab.n_vocab
    prompt = [vocab.id(t) for t in "a x b a x".split()]
    greedy = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.0, top_k=3, logit_bias={1: 2.0, 5: -np.inf}),
        SamplingParams(temperature=0.0, repeat_penalty=1.5, frequency_penalty=0.3, presence_penalty=0.2),
        SamplingParams(temperature=0.0, repeat_penalty=3.0, dry_multiplier=2.0),
        SamplingParams(temperature=0.0, repeat_penalty=3.0, dry_multiplier=2.0,
                       samplers=("dry", "penalties", "temperature")),
        SamplingParams(temperature=0.0, repeat_penalty=3.0, samplers=("temperature", "penalties")),
    ]
    sampled = [
        SamplingParams(seed=9),
        SamplingParams(seed=10, temperature=1.5, top_k=0, n_probs=2),
        # greedy, but a penalty after a cut is left to the exact chain
        SamplingParams(temperature=0.0, top_k=3, repeat_penalty=0.5, samplers=("top_k", "penalties", "temperature")),
    ]
    params = greedy + sampled
    for _ in range(5):
        logits = rng.normal(size=(len(params), v)).astype(np.float32) * 2
        batch = [TokenSampler(p, vocab, prompt_tokens=prompt) for p in params]
        twins = [TokenSampler(p, vocab, prompt_tokens=prompt) for p in params]
        got = sample_batch(mx.array(logits), batch)
        want = [t.sample(logits[i]) for i, t in enumerate(twins)]
        assert [g.id for g in got] == [w.id for w in want]
        assert got[len(greedy) + 1].probs == want[len(greedy) + 1].probs
    assert all(TokenSampler(p, vocab).is_greedy for p in greedy)
    assert not any(TokenSampler(p, vocab).is_greedy for p in sampled)


def test_batch_checks_its_shape():
    with pytest.raises(ValueError):
        sample_batch(mx.zeros((2, 4)), [TokenSampler(SamplingParams())])


@pytest.mark.parametrize(("last_n", "expected"), [(2, 0), (3, 3)])
def test_prompt_enters_the_penalty_window(last_n, expected):
    logits = np.array([5.0, 4.0, 3.0, 1.0], dtype=np.float32)
    params = SamplingParams(temperature=0.0, repeat_penalty=100.0, repeat_last_n=last_n)
    assert TokenSampler(params, prompt_tokens=[0, 1, 2]).sample(logits).id == expected
